"""An error hook keel asks after a failed create: the dynamic provider's
`create` fails until it has been called `KEEL_TEST_FAILURES` times (counted in
the file `KEEL_TEST_FILE`); the hook asks for a retry while fewer than three
failures were seen."""

import os

import pulumi
from pulumi import ErrorHook, ErrorHookArgs, ResourceHookBinding
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class FlakyProvider(ResourceProvider):
    def create(self, props):
        path = props["path"]
        calls = int(open(path, encoding="utf-8").read() or 0) + 1 if os.path.exists(path) else 1
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(calls))
        if calls <= int(props["failures"]):
            raise Exception(f"flaky create, attempt {calls}")
        return CreateResult(path, {"path": path, "failures": props["failures"], "calls": calls})

    def delete(self, id_, _props):
        os.remove(id_)


class Flaky(Resource):
    calls: pulumi.Output[int]

    def __init__(self, name, path, failures, opts=None):
        super().__init__(FlakyProvider(), name, {"path": path, "failures": failures, "calls": None}, opts)


def retry(args: ErrorHookArgs) -> bool:
    pulumi.log.info(
        f"on_error {args.name} {args.failed_operation} seen={len(args.errors)} "
        f"last={args.errors[0].split('flaky create, ')[-1]}"
    )
    return True


flaky = Flaky(
    "flaky",
    os.environ["KEEL_TEST_FILE"],
    int(os.environ["KEEL_TEST_FAILURES"]),
    pulumi.ResourceOptions(hooks=ResourceHookBinding(on_error=[ErrorHook("retry", retry)])),
)
pulumi.export("calls", flaky.calls)
