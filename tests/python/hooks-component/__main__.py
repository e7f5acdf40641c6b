"""A component whose after_create hook reads the outputs it registers."""

import pulumi
from pulumi import ResourceHook, ResourceHookArgs, ResourceHookBinding, ResourceOptions


def before(args: ResourceHookArgs):
    pulumi.log.info(f"before_create {args.name} outputs={args.new_outputs}")


def after(args: ResourceHookArgs):
    pulumi.log.info(f"after_create {args.name} child={args.new_outputs.get('childId')}")


class Site(pulumi.ComponentResource):
    def __init__(self, name, opts=None):
        super().__init__("keel:test:Site", name, {}, opts)
        bucket = pulumi.CustomResource(
            "aws:s3/bucket:Bucket", f"{name}-bucket", {"arn": None}, ResourceOptions(parent=self)
        )
        self.register_outputs({"childId": bucket.id})


site = Site(
    "site",
    ResourceOptions(
        hooks=ResourceHookBinding(
            before_create=[ResourceHook("before", before)],
            after_create=[ResourceHook("after", after)],
        )
    ),
)
