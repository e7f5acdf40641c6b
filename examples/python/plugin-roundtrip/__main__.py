"""KEEL_BENCH_N resources, each served by a plugin or by the simulated cloud.

`dynamic`: a `pulumi.dynamic.Resource` whose provider does no work, so each
create is one round trip through `python -m pulumi.dynamic` (Check, Diff on
later updates, Create). `sim`: a plain custom resource of package `bench`,
served by keel's simulated cloud. The difference per resource is what the
plugin protocol costs.
"""

import os

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider


class Nothing(ResourceProvider):
    def create(self, props):
        return CreateResult(f"thing-{props['i']}", {"i": props["i"]})

    def diff(self, _id, olds, news):
        return DiffResult(changes=olds.get("i") != news.get("i"))


class DynamicThing(Resource):
    def __init__(self, name, i):
        super().__init__(Nothing(), name, {"i": i})


class SimThing(pulumi.CustomResource):
    def __init__(self, name, i):
        super().__init__("bench:index:Thing", name, {"i": i})


n = int(os.environ.get("KEEL_BENCH_N", "200"))
make = DynamicThing if os.environ.get("KEEL_BENCH_MODE", "sim") == "dynamic" else SimThing
for i in range(n):
    make(f"thing-{i}", i)
