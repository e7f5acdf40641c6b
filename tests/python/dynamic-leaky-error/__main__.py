"""A dynamic provider that gives away the secret it was sent.

`Vault.create` prints its `password` input to stderr, logs it with
`pulumi.log`, and then fails with a message quoting it, as a careless
provider might. keel's test checks that
the value reaches none of keel's output, events, history or state files:
each place shows `[secret]` where the plaintext was.
"""

import sys

import pulumi
from pulumi.dynamic import Resource, ResourceProvider


class VaultProvider(ResourceProvider):
    def create(self, props):
        print(f"creating a vault with password {props['password']}", file=sys.stderr, flush=True)
        pulumi.log.warn(f"logged the vault password {props['password']}")
        raise Exception(f"password {props['password']} is too weak for this vault")


class Vault(Resource):
    def __init__(self, name, password, opts=None):
        super().__init__(VaultProvider(), name, {"password": password}, opts)


Vault("vault", pulumi.Output.secret("hunter2-leaky-xyz"))
