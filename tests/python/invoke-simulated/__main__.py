"""Functions of a package the simulated cloud serves: a lookup of
something outside the cloud (a public machine image) is answered with
the arguments and a stable ID; one among objects the cloud holds finds
the matching object."""

import pulumi

ami = pulumi.runtime.invoke("aws:ec2/getAmi:getAmi", {"mostRecent": True})
pulumi.export("ami", ami.value.get("id"))
bucket = pulumi.runtime.invoke("aws:s3/getBucket:getBucket", {"bucket": "legacy"})
pulumi.export("bucketArn", bucket.value.get("arn"))
