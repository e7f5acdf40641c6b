"""A dynamic provider served by keel through `python -m pulumi.dynamic`.

`Note` writes `content` to the file at `path` (its ID) and answers a random
`token`, which a later update keeps: keel's test checks that the file
exists after `up`, that the token is in the state and unchanged by a second
`up`, and that `destroy` removes the file. What `create` prints to stderr
reaches keel's output as a diagnostic.
"""

import os
import sys
import uuid

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult


class NoteProvider(ResourceProvider):
    def create(self, props):
        print(f"writing {props['path']}", file=sys.stderr, flush=True)
        with open(props["path"], "w", encoding="utf-8") as f:
            f.write(props["content"])
        return CreateResult(
            props["path"],
            {"path": props["path"], "content": props["content"], "token": uuid.uuid4().hex},
        )

    def diff(self, _id, olds, news):
        changed = [k for k in ("path", "content") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=["path"] if "path" in changed else [])

    def update(self, id_, olds, news):
        with open(id_, "w", encoding="utf-8") as f:
            f.write(news["content"])
        return UpdateResult({"path": id_, "content": news["content"], "token": olds["token"]})

    def delete(self, id_, _props):
        os.remove(id_)


class Note(Resource):
    token: pulumi.Output[str]

    def __init__(self, name, path, content, opts=None):
        super().__init__(NoteProvider(), name, {"path": path, "content": content, "token": None}, opts)


note = Note("note", os.environ["KEEL_TEST_FILE"], "written by a dynamic provider")
pulumi.export("token", note.token)
