"""A random password with its default provider; its `result` and
`bcryptHash` outputs are secrets."""

import pulumi

password = pulumi.CustomResource(
    "random:index/randomPassword:RandomPassword",
    "myRandomPassword",
    {
        "length": 16,
        "lower": True,
        "minLower": 2,
        "minNumeric": 2,
        "minSpecial": 2,
        "minUpper": 2,
        "number": True,
        "special": True,
        "upper": True,
    },
    pulumi.ResourceOptions(additional_secret_outputs=["bcryptHash", "result"]),
)
