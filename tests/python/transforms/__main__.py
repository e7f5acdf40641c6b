"""Transforms run by keel, in Pulumi's order: a resource's own, then its
ancestors' (nearest first), then the stack's; an invoke transform changes an
invoke's arguments."""

import pulumi
from pulumi import ResourceOptions, ResourceTransformArgs, ResourceTransformResult
from pulumi.runtime import register_invoke_transform, register_stack_transform


def bucket(name, props, opts=None):
    return pulumi.CustomResource("aws:s3/bucket:Bucket", name, props, opts)


def tag(label):
    """A transform appending `label` to a bucket's `trail` input."""

    def transform(args: ResourceTransformArgs):
        if args.type_ != "aws:s3/bucket:Bucket":
            return None
        props = {**args.props, "trail": args.props.get("trail", "") + label}
        return ResourceTransformResult(props=props, opts=args.opts)

    return transform


def secret_size(args: ResourceTransformArgs):
    return ResourceTransformResult(
        props={**args.props, "size": args.props["size"] * 2},
        opts=ResourceOptions.merge(
            args.opts, ResourceOptions(additional_secret_outputs=["arn"], protect=True)
        ),
    )


class Site(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Site", name, None, opts)
        inner = pulumi.ComponentResource(
            "keel:test:Inner",
            f"{name}-inner",
            None,
            ResourceOptions(parent=self, transforms=[tag("[inner]")]),
        )
        self.child = bucket(
            f"{name}-child",
            {"trail": "", "size": 1},
            ResourceOptions(parent=inner, transforms=[tag("[own]")]),
        )
        self.register_outputs({})


register_stack_transform(tag("[stack]"))

site = Site("site", ResourceOptions(transforms=[tag("[site-1]"), tag("[site-2]")]))
alone = bucket("alone", {"trail": "", "size": 5}, ResourceOptions(transforms=[secret_size]))


def invoke_transform(args):
    # The program asks for a resource that does not exist; the transform
    # points the invoke at `alone` instead.
    if args.token != "pulumi:pulumi:getResource":
        return None
    urn = args.args["urn"].replace("::nowhere", "::alone")
    return pulumi.InvokeTransformResult(args={**args.args, "urn": urn}, opts=args.opts)


register_invoke_transform(invoke_transform)


def look_up(urn):
    nowhere = urn.replace("::alone", "::nowhere")
    found = pulumi.runtime.invoke("pulumi:pulumi:getResource", {"urn": nowhere}).value
    return found["urn"]


pulumi.export("lookedUp", alone.urn.apply(look_up))
pulumi.export("childTrail", site.child.trail)
