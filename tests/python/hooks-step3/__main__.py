"""Resource hooks keel calls around its steps (version 3: `b` is no longer
registered; its delete runs after the program ended, with the hook its state
names, which this version registers)."""

import pulumi
from pulumi import ResourceHook, ResourceHookArgs


def before_delete(args: ResourceHookArgs):
    pulumi.log.info(
        f"before_delete {args.name} id={bool(args.id)} size={args.old_inputs['size']} "
        f"new_inputs={args.new_inputs} arn={args.old_outputs['arn']}"
    )


ResourceHook("before_delete", before_delete)
