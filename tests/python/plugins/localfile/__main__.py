"""keel's test provider `localfile`: real local files, served with the
Pulumi Python SDK's provider server (`pulumi.provider.experimental`).

Type `localfile:index:File`, inputs `path` and `content`; the ID is the
path. Changing `path` replaces the file, changing `content` updates it in
place. Its schema also has `localfile:notes/note:Note` (the same, under a
module-suffixed token, which a Pulumi YAML program may write
`localfile:notes:Note`) and the function `localfile:notes/readNote:readNote`
(`path` -> the file's text, a single value: `outputs` is a string type).
Any other type or function is refused. `Parameterize` with a value turns it
into the package that value names: its type is then `<name>:index:File`,
and the value (text) is written before every file's content (its state
keeps the content as given). For crash tests, `LOCALFILE_HANG=create` (or `delete`) makes the
provider stop in the middle of that operation: a create has written the
file, a delete has not removed it yet; it writes its process ID to
`<path>.hang` and waits (five minutes, or until the engine sends `Cancel`,
after which the operation completes, and `Cancel` writes
`LOCALFILE_CANCEL_MARK` when set), so the test can kill or interrupt keel
there. `LOCALFILE_CRASH=create` makes the plugin exit at once in a create,
before it writes anything.
"""

import asyncio
import json
import os
import sys

from pulumi.provider.experimental import provider as p
from pulumi.provider.experimental.property_value import PropertyValue
from pulumi.provider.experimental.server import main

TYPE = "localfile:index:File"
NOTE = "localfile:notes/note:Note"
READ_NOTE = "localfile:notes/readNote:readNote"
FILE_SPEC = {
    "inputProperties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
}
SCHEMA = {
    "name": "localfile",
    "version": "0.1.0",
    "resources": {TYPE: FILE_SPEC, NOTE: FILE_SPEC},
    "functions": {
        READ_NOTE: {
            "inputs": {"properties": {"path": {"type": "string"}}, "required": ["path"]},
            "outputs": {"type": "string"},
        }
    },
}


def text(props, key):
    v = props.get(key)
    return v.value if v is not None else None


CANCELLED = asyncio.Event()

# Set by `Parameterize`: the package name and the text put before contents.
PARAMETER = {"name": None, "prefix": ""}


def types():
    if PARAMETER["name"]:
        return (f"{PARAMETER['name']}:index:File",)
    return (TYPE, NOTE)


def crash(op):
    if os.environ.get("LOCALFILE_CRASH") == op:
        print(f"localfile: crashing in {op}", file=sys.stderr, flush=True)
        os._exit(3)


async def hang(op, path):
    if os.environ.get("LOCALFILE_HANG") == op:
        with open(f"{path}.hang", "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        try:
            await asyncio.wait_for(CANCELLED.wait(), timeout=300)
        except asyncio.TimeoutError:
            pass


def state(path, content):
    return {"path": PropertyValue(path), "content": PropertyValue(content)}


class Files(p.Provider):
    async def cancel(self):
        # Recorded where the test can see it.
        mark = os.environ.get("LOCALFILE_CANCEL_MARK")
        if mark:
            with open(mark, "w", encoding="utf-8") as f:
                f.write("cancel received")
        CANCELLED.set()

    async def parameterize(self, request):
        value = request.parameters
        PARAMETER["name"] = value.name
        PARAMETER["prefix"] = value.value.decode("utf-8")
        return p.ParameterizeResponse(value.name, value.version)

    async def get_schema(self, request):
        if PARAMETER["name"]:
            name = PARAMETER["name"]
            schema = {"name": name, "resources": {f"{name}:index:File": FILE_SPEC}}
            return p.GetSchemaResponse(schema=json.dumps(schema))
        return p.GetSchemaResponse(schema=json.dumps(SCHEMA))

    async def invoke(self, request):
        if request.tok != READ_NOTE:
            raise Exception(f"localfile has no function {request.tok}")
        with open(text(request.args, "path"), encoding="utf-8") as f:
            return p.InvokeResponse(return_value={"text": PropertyValue(f.read())})

    async def check(self, request):
        if request.type not in types():
            raise Exception(f"localfile has no resource type {request.type}")
        failures = [
            p.CheckFailure(k, f"`{k}` must be a string")
            for k in ("path", "content")
            if not isinstance(text(request.new_inputs, k), str)
        ]
        return p.CheckResponse(inputs=request.new_inputs, failures=failures)

    async def diff(self, request):
        changed = [
            k
            for k in ("path", "content")
            if text(request.old_state, k) != text(request.new_inputs, k)
        ]
        detailed = {
            k: p.PropertyDiff(
                p.PropertyDiffKind.UPDATE_REPLACE if k == "path" else p.PropertyDiffKind.UPDATE,
                True,
            )
            for k in changed
        }
        return p.DiffResponse(
            changes=bool(changed),
            replaces=[k for k in changed if k == "path"],
            diffs=changed,
            detailed_diff=detailed,
        )

    async def create(self, request):
        path, content = text(request.properties, "path"), text(request.properties, "content")
        if request.preview:
            return p.CreateResponse(resource_id="", properties=request.properties)
        crash("create")
        with open(path, "w", encoding="utf-8") as f:
            f.write(PARAMETER["prefix"] + content)
        await hang("create", path)
        return p.CreateResponse(resource_id=path, properties=state(path, content))

    async def read(self, request):
        path = request.resource_id
        if not os.path.exists(path):
            return p.ReadResponse()
        with open(path, encoding="utf-8") as f:
            content = f.read().removeprefix(PARAMETER["prefix"])
        return p.ReadResponse(resource_id=path, properties=state(path, content), inputs=state(path, content))

    async def update(self, request):
        path, content = request.resource_id, text(request.news, "content")
        if not request.preview:
            with open(path, "w", encoding="utf-8") as f:
                f.write(PARAMETER["prefix"] + content)
        return p.UpdateResponse(properties=state(path, content))

    async def delete(self, request):
        await hang("delete", request.resource_id)
        try:
            os.remove(request.resource_id)
        except FileNotFoundError:
            pass


if __name__ == "__main__":
    main(sys.argv[1:], "0.1.0", Files())
