"""Resource hooks keel calls around its steps (version 1: creates)."""

import pulumi
from pulumi import ResourceHook, ResourceHookArgs, ResourceHookBinding, ResourceHookOptions


def before_create(args: ResourceHookArgs):
    pulumi.log.info(
        f"before_create {args.name} {args.type} size={args.new_inputs['size']} "
        f"outputs={args.new_outputs}"
    )


def after_create(args: ResourceHookArgs):
    pulumi.log.info(f"after_create {args.name} id={bool(args.id)} arn={args.new_outputs['arn']}")


def before_delete(args: ResourceHookArgs):
    pulumi.log.info("never called: version 3 registers its own before_delete")


def noisy(args: ResourceHookArgs):
    raise ValueError("the noisy hook says no")


def dry(args: ResourceHookArgs):
    pulumi.log.info(f"dry hook of {args.name}: preview={pulumi.runtime.is_dry_run()}")


hooks = ResourceHookBinding(
    before_create=[ResourceHook("before_create", before_create), ResourceHook(
        "dry", dry, ResourceHookOptions(on_dry_run=True))],
    after_create=[
        ResourceHook("noisy", noisy, ResourceHookOptions(ignore_errors=True)),
        ResourceHook("after_create", after_create),
    ],
    before_delete=[ResourceHook("before_delete", before_delete)],
)
pulumi.CustomResource(
    "aws:s3/bucket:Bucket", "b", {"size": 1, "arn": None}, pulumi.ResourceOptions(hooks=hooks)
)
