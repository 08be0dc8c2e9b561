"""Queue tags (TagQueue, UntagQueue, ListQueueTags, CreateQueue's tags) with boto3 and the query
protocol, checked with SQS's limits; kept in the queue's ``sqs`` prop, dropped with the queue."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import error_code, signed_query, text, texts


def test_tag_queue_adds_and_replaces_tags_and_list_queue_tags_answers_them(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="tagged")["QueueUrl"]
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    sqs.tag_queue(QueueUrl=url, Tags={"team": "core", "Team": "other", "empty": ""})
    sqs.tag_queue(QueueUrl=url, Tags={"team": "ops"})
    # Keys are case-sensitive; a tag given again takes its new value; a value may be empty.
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "ops", "Team": "other", "empty": ""}


def test_untag_queue_removes_the_keys_named(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="untagged", tags={"a": "1", "b": "2", "c": "3"})["QueueUrl"]
    sqs.untag_queue(QueueUrl=url, TagKeys=["a", "c", "absent"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "2"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["b"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


def test_create_queue_takes_tags(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="born-tagged.fifo", Attributes={"FifoQueue": "true"}, tags={"k": "v"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"k": "v"}
    # Tags are not attributes.
    assert "Tags" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_tags_and_attributes_do_not_overwrite_each_other(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="both", tags={"k": "v"})["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "5"})
    sqs.tag_queue(QueueUrl=url, Tags={"k2": "v2"})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MaximumMessageSize": "2048"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"k": "v", "k2": "v2"}
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["DelaySeconds"], attrs["MaximumMessageSize"]) == ("5", "2048")


def test_tags_are_dropped_with_the_queue(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="reborn", tags={"old": "yes"})["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    url = sqs.create_queue(QueueName="reborn")["QueueUrl"]
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


@pytest.mark.parametrize(
    "tags",
    [
        {"aws:reserved": "x"},
        {"AWS:reserved": "x"},
        {"": "x"},
        {"k" * 129: "x"},
        {"k": "v" * 257},
        {f"k{i}": "v" for i in range(51)},
    ],
    ids=["aws-prefix", "aws-prefix-upper", "empty-key", "long-key", "long-value", "51-tags"],
)
def test_tags_out_of_sqs_limits_are_invalid_parameter_value(sqs: Any, tags: dict[str, str]) -> None:
    url = sqs.create_queue(QueueName="limits")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        sqs.tag_queue(QueueUrl=url, Tags=tags)
    assert error_code(e) == "InvalidParameterValue"
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName="limits-new", tags=tags)
    assert error_code(e) == "InvalidParameterValue"
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


def test_the_limit_counts_the_tags_a_queue_has(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="fifty", tags={f"k{i}": "v" for i in range(49)})["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={"k0": "replaced", "k49": "v"})  # 50: at the limit
    with pytest.raises(ClientError) as e:
        sqs.tag_queue(QueueUrl=url, Tags={"k50": "v"})
    assert error_code(e) == "InvalidParameterValue"
    tags = sqs.list_queue_tags(QueueUrl=url)["Tags"]
    assert len(tags) == 50 and tags["k0"] == "replaced"


def test_the_largest_tags_fit(sqs: Any) -> None:
    # 50 tags of the longest keys and values, in 4-byte UTF-8 characters.
    tags = {f"{i:02d}" + "\U0001f600" * 126: "\U0001f600" * 256 for i in range(50)}
    url = sqs.create_queue(QueueName="largest", tags=tags)["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == tags


def test_tags_of_a_missing_queue_are_non_existent_queue(sqs: Any, node: NodeThread) -> None:
    url = sqs.create_queue(QueueName="gone")["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("tag_queue", {"Tags": {"k": "v"}}),
        ("untag_queue", {"TagKeys": ["k"]}),
        ("list_queue_tags", {}),
    ]
    for action, extra in calls:
        with pytest.raises(ClientError) as e:
            getattr(sqs, action)(QueueUrl=url, **extra)
        assert error_code(e) == "AWS.SimpleQueueService.NonExistentQueue"


def test_tags_over_the_query_protocol(sqs: Any, node: NodeThread) -> None:
    url = sqs.create_queue(QueueName="query-tags")["QueueUrl"]
    status, _, _ = signed_query(
        node, {"Action": "TagQueue", "QueueUrl": url, "Tag.1.Key": "a", "Tag.1.Value": "1", "Tag.2.Key": "b"}
    )
    assert status == 200
    status, _, _ = signed_query(node, {"Action": "UntagQueue", "QueueUrl": url, "TagKey.1": "b"})
    assert status == 200
    status, root, _ = signed_query(node, {"Action": "ListQueueTags", "QueueUrl": url})
    assert status == 200
    assert texts(root, "ListQueueTagsResult/Tag/Key") == ["a"]
    assert text(root, "ListQueueTagsResult/Tag/Value") == "1"
