"""Version 2: the component's child `old-bucket` is now `bucket`. A state
migration renames it in the prior state, so the physical bucket is kept
(same ID, still protected) instead of replaced; once renamed, the callback
answers None (no change)."""

import pulumi

OLD, NEW = "old-bucket", "bucket"


def rename_bucket(args: pulumi.StateMigrationArgs):
    new_state, successors = [], {}
    for resource in args.old_state:
        urn = resource["urn"]
        if urn.endswith("::" + OLD):
            renamed = urn[: -len(OLD)] + NEW
            successors[urn] = renamed
            resource = dict(resource, urn=renamed)
        new_state.append(resource)
    if not successors:
        return None
    return pulumi.StateMigrationResult(new_state=new_state, successors=successors)


class Site(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("keel:test:Site", name, None, opts)
        self.bucket = pulumi.CustomResource(
            "aws:s3/bucket:Bucket",
            NEW,
            {"name": "site-bucket", "arn": None, "websiteEndpoint": None},
            pulumi.ResourceOptions(parent=self, protect=True),
        )
        self.logs = pulumi.CustomResource(
            "aws:s3/bucket:Bucket",
            "logs",
            {"name": "site-logs"},
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"endpoint": self.bucket.websiteEndpoint})


site = Site("site", pulumi.ResourceOptions(state_migrations=[rename_bucket]))
cdn = pulumi.CustomResource(
    "aws:cloudfront:Distribution",
    "cdn",
    {"origin": site.bucket.websiteEndpoint, "domainName": None},
)
pulumi.export("bucketArn", site.bucket.arn)
pulumi.export("cdnDomain", cdn.domainName)
