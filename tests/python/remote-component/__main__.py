"""A program using a remote component (`keelcomp:index:Greeter`, served by
the `keelcomp` plugin next to it), one of its methods and a function of its
package."""

import pulumi


class Greeter(pulumi.ComponentResource):
    def __init__(self, name, greeting, opts=None):
        props = {"greeting": greeting, "message": None, "noteId": None}
        super().__init__("keelcomp:index:Greeter", name, props, opts, True)

    def greet(__self__, name):
        return pulumi.runtime.call(
            "keelcomp:index:Greeter/greet", {"__self__": __self__, "name": name}, res=__self__
        )


greeter = Greeter("hello", greeting="Hello")
pulumi.export("message", greeter.message)
pulumi.export("noteId", greeter.noteId)
pulumi.export("greeted", greeter.greet("Alice").apply(lambda r: r["message"]))
shout = pulumi.runtime.invoke("keelcomp:index:shout", {"text": "quiet"})
pulumi.export("shout", shout.value["text"])
