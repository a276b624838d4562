"""Translate the SAM template to plain CloudFormation, offline.

Run with the SAM CLI's Python (.venv-sam, requirements-sam.txt):

    translate.py TEMPLATE OUT.json CODE_BUCKET CODE_KEY

Every AWS::Serverless::Function gets CodeUri s3://CODE_BUCKET/CODE_KEY (the deploy
test uploads a tiny zip there), and the managed policies SAM attaches come from a fixed
map instead of IAM's ListPolicies: no network. The result is the JSON CloudFormation
would receive after the AWS::Serverless-2016-10-31 transform. `translate` is also used
by sam_package_check.py on the template `sam package` wrote (CodeUri kept).
"""

import json
import os
import sys

# samtranslator asks boto3 for the region (partition lookups); never the network.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samcli.yamlhelper import yaml_parse  # noqa: E402
from samtranslator.parser.parser import Parser  # noqa: E402
from samtranslator.translator.translator import Translator  # noqa: E402

# The AWS managed policies SAM attaches to function roles (basic execution, SQS
# polling, VPC ENIs, X-Ray). Any other name is an error, so a new one shows up here.
MANAGED_POLICIES = {
    name: f"arn:aws:iam::aws:policy/service-role/{name}"
    for name in (
        "AWSLambdaBasicExecutionRole",
        "AWSLambdaSQSQueueExecutionRole",
        "AWSLambdaVPCAccessExecutionRole",
        "AWSLambdaRole",
    )
}
MANAGED_POLICIES["AWSXrayWriteOnlyAccess"] = "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"
MANAGED_POLICIES["AWSXRayDaemonWriteAccess"] = "arn:aws:iam::aws:policy/AWSXRayDaemonWriteAccess"


def translate(sam: dict) -> dict:
    """The plain CloudFormation of a SAM template (its CodeUri as they are)."""
    return Translator(None, Parser()).translate(
        sam,
        parameter_values={},
        get_managed_policy_map=lambda: MANAGED_POLICIES,
    )


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit("usage: translate.py TEMPLATE OUT.json CODE_BUCKET CODE_KEY")
    src, out, bucket, key = sys.argv[1:]
    with open(src, encoding="utf-8") as f:
        sam = yaml_parse(f.read())
    for logical, res in sam.get("Resources", {}).items():
        if res.get("Type") == "AWS::Serverless::Function":
            res.setdefault("Properties", {})["CodeUri"] = f"s3://{bucket}/{key}"
    cfn = translate(sam)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(cfn, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
