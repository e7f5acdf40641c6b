"""A keel migration callback (`command: ["python3", "migrations/split.py"]`).

Reads {"urn": ..., "oldState": [...]} on stdin: the prior state of the
component being registered (first) and of its descendants, as checkpoint
resources. Splits the `website` input of the bucket named `assets` out into
an `assets-website` resource (same physical ID and provider: a migration
cannot create cloud objects) and prints {"newState": [...], "successors":
{}}, dropping the `aliases` earlier renames left in the prior states (a
result may not carry them); prints null (no change) once the state has that
shape, so it can stay attached to the component while the split rolls out.

Take it out of the program once every stack has run it: the cloud keeps the
website settings on the bucket, so a `keel refresh` reads them back into the
bucket's inputs (a refresh takes the inputs a read returns, as Pulumi's
does), and should `assets-website` then be destroyed on its own, this
callback would split it off again with no settings object behind it.
"""

import json
import sys

SETTINGS_TYPE = "aws:s3/bucketWebsiteConfiguration:BucketWebsiteConfiguration"
FLAGS = ("protect", "retainOnDelete", "external", "taint", "pendingReplacement")


def name_of(urn):
    return urn.split("::", 3)[3]


def main():
    args = json.load(sys.stdin)
    states = args["oldState"]
    root = states[0]
    by_name = {name_of(s["urn"]): s for s in states}
    bucket = by_name.get("assets")
    if "assets-website" in by_name or bucket is None:
        return None
    website = (bucket.get("inputs") or {}).get("website")
    if not isinstance(website, dict):
        return None

    # A result may not carry `aliases` (renames go through successors);
    # prior states record those of earlier renames.
    for s in states:
        s.pop("aliases", None)

    # The bucket keeps its URN, without the inline settings.
    for key in ("inputs", "outputs"):
        if isinstance(bucket.get(key), dict):
            bucket[key].pop("website", None)

    # The settings resource: a child of the component (its URN carries the
    # component's type chain), managing the bucket's physical object.
    stack_project, qualified = root["urn"].split("::")[0:2], root["urn"].split("::")[2]
    prefix = "::".join(stack_project)
    settings = {
        "urn": f"{prefix}::{qualified}${SETTINGS_TYPE}::assets-website",
        "custom": True,
        "id": bucket["id"],
        "type": SETTINGS_TYPE,
        "inputs": {"bucket": bucket["id"], **website},
        "outputs": {"bucket": bucket["id"], **website},
        "parent": root["urn"],
        "dependencies": [bucket["urn"]],
        "propertyDependencies": {"bucket": [bucket["urn"]]},
    }
    for key in ("provider", "extensionRef") + FLAGS:
        if key in bucket:
            settings[key] = bucket[key]

    position = states.index(bucket) + 1
    new_state = states[:position] + [settings] + states[position:]
    return {"newState": new_state, "successors": {}}


if __name__ == "__main__":
    print(json.dumps(main()))
