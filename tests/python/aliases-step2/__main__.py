"""Alias scenarios, second version: each component renamed or re-typed
with an alias on the component alone (its children inherit it), except
where a child is renamed too. Run after `aliases-step1`, every step must
be `same`.
"""

import copy
import os

import pulumi


class Part(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Part", name, None, opts)


class Shop(pulumi.ComponentResource):
    """Unchanged: renaming the instance renames `<name>-db` and `<name>-logs`
    with it (the child's name prefix follows the parent's old name)."""

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
    Shop("store", pulumi.ResourceOptions(aliases=[pulumi.Alias(name="shop")]))


class Crate(pulumi.ComponentResource):
    """A new type; the old one is an alias, and the children's URNs (whose
    qualified type names the parent's type) follow."""

    def __init__(self, name, opts=None):
        opts = copy.copy(opts) if opts else pulumi.ResourceOptions()
        opts.aliases = [pulumi.Alias(type_="keel:test:Crate"), *(opts.aliases or [])]
        super().__init__("keel:other:Box", name, None, opts)
        Part("inside", pulumi.ResourceOptions(parent=self))
        pulumi.CustomResource(
            "aws:s3/bucket:Bucket", "crate-data", {"name": "crate"}, pulumi.ResourceOptions(parent=self)
        )


def retype_component():
    Crate("crate")


class Inner(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        opts = copy.copy(opts) if opts else pulumi.ResourceOptions()
        opts.aliases = [pulumi.Alias(type_=f"keel:test:Inner-v{i}") for i in range(100)]
        super().__init__("keel:test:Inner-v100", name, None, opts)
        Part("leaf", pulumi.ResourceOptions(parent=self))


class Outer(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        opts = pulumi.ResourceOptions(
            aliases=[pulumi.Alias(type_=f"keel:test:Outer-v{i}") for i in range(10)]
        )
        super().__init__("keel:test:Outer-v10", name, None, opts)
        Inner("inner", pulumi.ResourceOptions(parent=self))


def retype_parents():
    Outer("outer")


class Team(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Team", name, None, opts)
        # Renamed too: its alias names its old name under the new parent,
        # whose own old name the engine puts back in the prefix.
        Part(
            f"{name}-lead",
            pulumi.ResourceOptions(
                parent=self, aliases=[pulumi.Alias(name=f"{name}-member", parent=self)]
            ),
        )


def rename_component_and_child():
    Team("crew", pulumi.ResourceOptions(aliases=[pulumi.Alias(name="team")]))


SCENARIOS = {
    "rename_component": rename_component,
    "retype_component": retype_component,
    "retype_parents": retype_parents,
    "rename_component_and_child": rename_component_and_child,
}

chosen = os.environ.get("KEEL_ALIAS_SCENARIOS")
for name in chosen.split(",") if chosen else SCENARIOS:
    SCENARIOS[name]()
