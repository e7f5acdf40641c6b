"""The resources of Pulumi's `command` EC2 example, as its stack records
them (with the defaults its providers filled in, which keel's simulated
providers do not add), registered with the plugin versions the stack was
deployed with: the default providers are `default_4_18_0` and
`default_0_0_1_alpha_1630620749_0a3b399e_dirty`, and `aws:region` comes
from `Pulumi.test.yaml`. The commands' scripts were secrets encrypted by
the Pulumi service; the test replaces them with the plaintexts below."""

import pulumi

AWS = "4.18.0"
COMMAND = "0.0.1-alpha.1630620749+0a3b399e.dirty"


def rule(port):
    return {
        "__defaults": ["self"],
        "cidrBlocks": ["0.0.0.0/0"],
        "fromPort": port,
        "protocol": "tcp",
        "self": False,
        "toPort": port,
    }


secgrp = pulumi.CustomResource(
    "aws:ec2/securityGroup:SecurityGroup",
    "secgrp",
    {
        "__defaults": ["name", "revokeRulesOnDelete"],
        "description": "Foo",
        "ingress": [rule(22), rule(80)],
        "name": "secgrp-4761833",
        "revokeRulesOnDelete": False,
    },
    pulumi.ResourceOptions(version=AWS),
)

key = pulumi.CustomResource(
    "aws:ec2/keyPair:KeyPair",
    "key",
    {
        "__defaults": ["keyName"],
        "keyName": "key-c9ba5f4",
        "publicKey": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC6CD06v1RHDlLvCqD/QfsMovlpNy4I+rVsuSc3ytPTNIJ5PhJeU+ZtpMqLyndmEAlsGZqsIHNjNg9hpYKj9pTHImeJuPqTVfMefn5CqKA1QymwJLRlA/K5GrOzjxzn6SH4sEp5BqBrXNEVRwyXlFnF3xWNuZPsN2zUHMOmhGstLF7NDAEth91gHVOccTvnsMkneqemF5vO44AAuGB/QgZJufNr8RsbSziBomKM4IKl7WS8J6xta+uS+xbRstfdEMIEB9TRgUClIGEtUWH/UdFpK1HrIU0UQHSBrNhXxgLGmztQjR07hZpvTrZqueZLMsXw66FKWahIhSOwP5FCUhKp017WghZqGkPz1Sh1Uinl3pxQmUzucLrBkkrNoE11WqfikpYq4aV9UZEaNDgqECbzIOn6+NSvv8vNH2ZPhLb9YuiFU0sc3WzwJQ8lc6SqopsIj2jPosziXz0aah30e/wWPxruk2e5IDp0VRJtPXgHyPXD8QrywMyDwDLktPLGIhU= lukehoban@Lukes-MacBook-Pro-3.local",
    },
    pulumi.ResourceOptions(version=AWS),
)

server = pulumi.CustomResource(
    "aws:ec2/instance:Instance",
    "server",
    {
        "__defaults": ["getPasswordData", "sourceDestCheck"],
        "ami": "ami-082b5a644766e0e6f",
        "getPasswordData": False,
        "instanceType": "t2.micro",
        "keyName": "key-c9ba5f4",
        "sourceDestCheck": True,
        "vpcSecurityGroupIds": ["sg-07a38de53027cb024"],
    },
    pulumi.ResourceOptions(version=AWS, depends_on=[key, secgrp]),
)

config = pulumi.CustomResource(
    "command:index:Command",
    "config",
    {"create": pulumi.Output.secret("config command")},
    pulumi.ResourceOptions(version=COMMAND, depends_on=[server]),
)

cat = pulumi.CustomResource(
    "command:index:Command",
    "cat",
    {"create": pulumi.Output.secret("cat command")},
    pulumi.ResourceOptions(version=COMMAND, depends_on=[server, config]),
)
