"""Alias scenarios, first version: the components as they were.

Each scenario is a function; KEEL_ALIAS_SCENARIOS (comma-separated) picks
some, else all run in one program. `aliases-step2` is the next version.
"""

import os

import pulumi


class Part(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Part", name, None, opts)


class Shop(pulumi.ComponentResource):
    """Children named after the shop, and one that is not."""

    def __init__(self, name, opts=None):
        super().__init__("keel:test:Shop", name, None, opts)
        Part(f"{name}-db", pulumi.ResourceOptions(parent=self))
        Part("cache", pulumi.ResourceOptions(parent=self))
        pulumi.CustomResource(
            "aws:s3/bucket:Bucket",
            f"{name}-logs",
            {"name": "shop-logs"},
            pulumi.ResourceOptions(parent=self),
        )


def rename_component():
    Shop("shop")


class Crate(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Crate", name, None, opts)
        Part("inside", pulumi.ResourceOptions(parent=self))
        pulumi.CustomResource(
            "aws:s3/bucket:Bucket", "crate-data", {"name": "crate"}, pulumi.ResourceOptions(parent=self)
        )


def retype_component():
    Crate("crate")


class Inner(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Inner-v0", name, None, opts)
        Part("leaf", pulumi.ResourceOptions(parent=self))


class Outer(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Outer-v0", name, None, opts)
        Inner("inner", pulumi.ResourceOptions(parent=self))


def retype_parents():
    Outer("outer")


class Team(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Team", name, None, opts)
        Part(f"{name}-member", pulumi.ResourceOptions(parent=self))


def rename_component_and_child():
    Team("team")


SCENARIOS = {
    "rename_component": rename_component,
    "retype_component": retype_component,
    "retype_parents": retype_parents,
    "rename_component_and_child": rename_component_and_child,
}

chosen = os.environ.get("KEEL_ALIAS_SCENARIOS")
for name in chosen.split(",") if chosen else SCENARIOS:
    SCENARIOS[name]()
