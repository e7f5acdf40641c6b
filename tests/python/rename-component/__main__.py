"""A component renamed from `comp3` to `newcomp3` through aliases, with two
component children (one renamed along with it)."""

import pulumi


class Resource(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("my:module:Resource", name, None, opts)


class ComponentThree(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("my:module:ComponentThree", name, None, opts)
        Resource(
            f"{name}-child",
            pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(name="comp3-child")]),
        )
        Resource("otherchild", pulumi.ResourceOptions(parent=self))


ComponentThree("newcomp3", pulumi.ResourceOptions(aliases=[pulumi.Alias(name="comp3")]))
