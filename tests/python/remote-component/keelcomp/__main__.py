"""keel's test provider of remote components (package `keelcomp`), written
with the Pulumi SDK's `pulumi.provider`, as a component package author
would: `keelcomp:index:Greeter` is constructed here (a child component and
a dynamic-provider note under it), `Greeter/greet` is its method, and
`keelcomp:index:shout` a function."""

import sys
from typing import Optional

import pulumi
import pulumi.dynamic as dynamic
import pulumi.provider as provider
from pulumi.provider.provider import InvokeResult


class NoteProvider(dynamic.ResourceProvider):
    """A note kept in state only: its ID is its text."""

    def create(self, props):
        return dynamic.CreateResult(id_=f"note-{props['text']}", outs={"text": props["text"]})


class Note(dynamic.Resource):
    def __init__(self, name, text, opts=None):
        super().__init__(NoteProvider(), name, {"text": text}, opts)


class Greeter(pulumi.ComponentResource):
    def __init__(self, name: str, greeting=None, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("keelcomp:index:Greeter", name, {"greeting": greeting}, opts)
        if opts and opts.urn:
            # Rehydrated for a method call: its outputs come from the state.
            return
        self.greeting = pulumi.Output.from_input(greeting)
        part = pulumi.ComponentResource(
            "keelcomp:index:Part", f"{name}-part", None, pulumi.ResourceOptions(parent=self)
        )
        note = Note(f"{name}-note", self.greeting, pulumi.ResourceOptions(parent=part))
        self.message = pulumi.Output.concat(self.greeting, ", world")
        self.note_id = note.id
        self.register_outputs(
            {"greeting": self.greeting, "message": self.message, "noteId": self.note_id}
        )


class Provider(provider.Provider):
    VERSION = "0.0.1"

    class Module(pulumi.runtime.ResourceModule):
        def version(self):
            return Provider.VERSION

        def construct(self, name: str, typ: str, urn: str) -> pulumi.Resource:
            if typ == "keelcomp:index:Greeter":
                return Greeter(name, opts=pulumi.ResourceOptions(urn=urn))
            raise Exception(f"unknown resource type {typ}")

    def __init__(self):
        super().__init__(Provider.VERSION)
        pulumi.runtime.register_resource_module("keelcomp", "index", Provider.Module())

    def construct(self, name, resource_type, inputs, options=None):
        if resource_type != "keelcomp:index:Greeter":
            raise Exception(f"unknown resource type {resource_type}")
        print(f"constructing {name}", file=sys.stderr)
        g = Greeter(name, inputs["greeting"], options)
        return provider.ConstructResult(
            urn=g.urn,
            state={"greeting": g.greeting, "message": g.message, "noteId": g.note_id},
        )

    def call(self, token, args):
        if token != "keelcomp:index:Greeter/greet":
            raise Exception(f"unknown method {token}")
        g = args["__self__"]
        return provider.CallResult(
            outputs={"message": pulumi.Output.concat(g.greeting, ", ", args["name"], "!")}
        )

    def invoke(self, token, args):
        if token != "keelcomp:index:shout":
            raise Exception(f"unknown function {token}")
        return InvokeResult(outputs={"text": str(args["text"]).upper()})


if __name__ == "__main__":
    provider.main(Provider(), sys.argv[1:])
