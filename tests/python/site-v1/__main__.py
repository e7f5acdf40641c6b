"""A component with custom children, served by keel's simulated cloud."""

import pulumi


class Site(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("keel:test:Site", name, None, opts)
        self.bucket = pulumi.CustomResource(
            "aws:s3/bucket:Bucket",
            "old-bucket",
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


print("deploying the site")
pulumi.log.warn("the site has no TLS certificate yet")
site = Site("site")
cdn = pulumi.CustomResource(
    "aws:cloudfront:Distribution",
    "cdn",
    {"origin": site.bucket.websiteEndpoint, "domainName": None},
)
pulumi.export("bucketArn", site.bucket.arn)
pulumi.export("cdnDomain", cdn.domainName)
