"""Prints a Pulumi dynamic provider, serialized by the SDK itself
(`pulumi.dynamic.dynamic.serialize_provider`: base64 of dill), for
tests/plugin_client.rs to send as the `__provider` input of a
`pulumi-python:dynamic:Resource`.

The provider manages a real local file: inputs `path` and `content`; the ID
is the path. A `content` of "FAIL" makes `create` raise.
"""

import os

from pulumi.dynamic import (
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    ResourceProvider,
    UpdateResult,
)
from pulumi.dynamic.dynamic import serialize_provider


class FileProvider(ResourceProvider):
    def check(self, _olds, news):
        failures = []
        if not news.get("path"):
            from pulumi.dynamic import CheckFailure

            failures.append(CheckFailure("path", "a path is required"))
        return CheckResult(news, failures)

    def diff(self, _id, olds, news):
        replaces = ["path"] if olds.get("path") != news.get("path") else []
        changes = olds.get("path") != news.get("path") or olds.get("content") != news.get(
            "content"
        )
        return DiffResult(changes=changes, replaces=replaces)

    def create(self, props):
        if props["content"] == "FAIL":
            raise Exception("asked to fail")
        with open(props["path"], "w", encoding="utf-8") as f:
            f.write(props["content"])
        return CreateResult(
            props["path"],
            {"path": props["path"], "content": props["content"], "size": len(props["content"])},
        )

    def read(self, id_, props):
        if not os.path.exists(id_):
            return ReadResult(None, {})
        with open(id_, encoding="utf-8") as f:
            content = f.read()
        return ReadResult(id_, {"path": id_, "content": content, "size": len(content)})

    def update(self, id_, _olds, news):
        with open(id_, "w", encoding="utf-8") as f:
            f.write(news["content"])
        return UpdateResult({"path": id_, "content": news["content"], "size": len(news["content"])})

    def delete(self, id_, _props):
        os.remove(id_)


print(serialize_provider(FileProvider()))
