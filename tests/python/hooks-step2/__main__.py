"""Resource hooks keel calls around its steps (version 2: an update, and a
hook that raises)."""

import pulumi
from pulumi import ResourceHook, ResourceHookArgs, ResourceHookBinding


def before_update(args: ResourceHookArgs):
    pulumi.log.info(
        f"before_update {args.name} size {args.old_inputs['size']} -> {args.new_inputs['size']} "
        f"new_outputs={args.new_outputs}"
    )


def after_update(args: ResourceHookArgs):
    same = args.old_outputs["arn"] == args.new_outputs["arn"]
    pulumi.log.info(f"after_update {args.name} same arn={same}")


def before_delete(args: ResourceHookArgs):
    pulumi.log.info("never called: version 3 registers its own before_delete")


def refuse(args: ResourceHookArgs):
    raise ValueError(f"no bucket named {args.name} today")


b = pulumi.CustomResource(
    "aws:s3/bucket:Bucket",
    "b",
    {"size": 2, "arn": None},
    pulumi.ResourceOptions(
        hooks=ResourceHookBinding(
            before_update=[ResourceHook("before_update", before_update)],
            after_update=[ResourceHook("after_update", after_update)],
            before_delete=[ResourceHook("before_delete", before_delete)],
        )
    ),
)
pulumi.CustomResource(
    "aws:s3/bucket:Bucket",
    "refused",
    {"size": 3},
    # After `b`: the program raises only once b's update (and its hooks) ran.
    pulumi.ResourceOptions(depends_on=[b], hooks=ResourceHookBinding(before_create=[refuse])),
)
