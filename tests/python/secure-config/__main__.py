"""A database whose password and settings come from secure config."""

import pulumi

config = pulumi.Config()
env = config.require("env")
password = config.require_secret("password")
# An object with secure values inside (`db.password`, `db.hosts[1]`).
settings = config.require_secret_object("db")

pulumi.CustomResource(
    "aws:rds/instance:Instance",
    "db",
    {"env": env, "password": password, "settings": settings},
)

# What a program prints is shown by keel: secure values are masked there.
print(f"env is {env}; the password is {config.require('password')}")
pulumi.export("user", settings.apply(lambda s: s["user"]))
