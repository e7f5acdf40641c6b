"""A function of a package the simulated cloud serves: keel must say it
cannot answer it."""

import pulumi

ami = pulumi.runtime.invoke("aws:ec2/getAmi:getAmi", {"mostRecent": True})
pulumi.export("ami", ami.value.get("id"))
