"""The stack's S3 warehouse: its bucket, made on the S3 server before any catalog writes to it."""

from __future__ import annotations

from icegroup.infra.stack_layout import BUCKET, S3_KEYS, Layout


def ensure_bucket(layout: Layout) -> None:
    """Create the warehouse bucket unless it exists, and check it is there (boto3, the keys from ``env``)."""
    import boto3

    client = boto3.client("s3", endpoint_url=layout.s3_endpoint, **boto_keys())
    if BUCKET not in {bucket["Name"] for bucket in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=BUCKET)
    client.head_bucket(Bucket=BUCKET)


def boto_keys() -> dict[str, str]:
    """The stack's S3 keys, as boto3 takes them."""
    return {
        "aws_access_key_id": S3_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
        "region_name": S3_KEYS["AWS_REGION"],
    }
