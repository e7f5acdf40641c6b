"""Objects whose sources are a file asset, a directory archive and a text
asset (the paths are relative to this directory)."""

import pulumi

OBJECT = "aws:s3/bucketObject:BucketObject"

pulumi.CustomResource(
    OBJECT, "index", {"key": "index.html", "source": pulumi.FileAsset("www/index.html")}
)
pulumi.CustomResource(OBJECT, "bundle", {"key": "site.tar", "source": pulumi.FileArchive("www")})
pulumi.CustomResource(OBJECT, "banner", {"key": "banner.txt", "source": pulumi.StringAsset("hello")})
