"""The cross-encoder slot with a real (tiny) ONNX cross-encoder built here with onnx.helper.

The model embeds each token (a Gather over input_ids), sums the query segment and the document segment
apart (token_type_ids and attention_mask as weights) and answers their dot product as the logit: with
near-orthogonal random embeddings, a document sharing the query's words scores higher, which is what a
trained cross-encoder does on such pairs. It runs in onnxruntime like any exported model, with the
packaged MiniLM tokenizer.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core import load_config
from core.embedders.local import tokenizer_path
from core.rerankers import RerankError, create_reranker
from core.rerankers.cross_encoder import DEFAULT_MAX_LENGTH, CrossEncoderReranker

VOCAB, DIMS = 30522, 48
QUERY = "when did alice adopt the cat"
MATCH = "alice adopted the cat in may"
OTHER = "bob repaired the billing service"


def tiny_cross_encoder(
    classes: int = 1, inputs: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
) -> onnx.ModelProto:
    """A graph with a cross-encoder's inputs and `classes` logits per pair (see the module docstring)."""
    table = np.random.default_rng(7).standard_normal((VOCAB, DIMS)).astype(np.float32)
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    last = numpy_helper.from_array(np.array([2], dtype=np.int64), "last")
    nodes = []
    if "token_type_ids" not in inputs:  # a RoBERTa-like model: one segment as far as the graph knows
        zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
        nodes += [
            helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
            helper.make_node("ConstantOfShape", ["ids_shape"], ["token_type_ids"], value=zero),
        ]
    nodes += [
        helper.make_node("Gather", ["table", "input_ids"], ["emb"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["segment"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mask", "segment"], ["doc_w"]),
        helper.make_node("Sub", ["mask", "doc_w"], ["query_w"]),
        helper.make_node("Unsqueeze", ["doc_w", "last"], ["doc_w3"]),
        helper.make_node("Unsqueeze", ["query_w", "last"], ["query_w3"]),
        helper.make_node("Mul", ["emb", "doc_w3"], ["doc_emb"]),
        helper.make_node("Mul", ["emb", "query_w3"], ["query_emb"]),
        helper.make_node("ReduceSum", ["doc_emb", "axes"], ["doc_vec"], keepdims=0),
        helper.make_node("ReduceSum", ["query_emb", "axes"], ["query_vec"], keepdims=0),
        helper.make_node("Mul", ["doc_vec", "query_vec"], ["both"]),
        helper.make_node("ReduceSum", ["both", "axes"], ["logit"], keepdims=1),
    ]
    if classes > 1:  # a classifier head: (negative..., positive)
        nodes += [
            helper.make_node("Neg", ["logit"], ["negative"]),
            helper.make_node("Concat", ["negative"] * (classes - 1) + ["logit"], ["logits"], axis=1),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["logit"], ["logits"]))
    declared = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in inputs]
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        declared,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        initializer=[numpy_helper.from_array(table, "table"), axes, last],
    )
    # IR version 9: what every onnxruntime of the last years reads (the onnx package writes newer ones).
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def make_folder(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A model folder: model.onnx (`tiny_cross_encoder(**model)`), tokenizer.json and optional extra files."""

    def make(files: dict[str, str] | None = None, **model) -> Path:
        folder = tmp_path_factory.mktemp("cross-encoder")
        onnx.save(tiny_cross_encoder(**model), folder / "model.onnx")
        shutil.copy(tokenizer_path(), folder / "tokenizer.json")
        for name, text in (files or {}).items():
            (folder / name).write_text(text)
        return folder

    return make


@pytest.fixture(scope="module")
def folder(make_folder: Callable[..., Path]) -> Path:
    return make_folder()


@pytest.mark.parametrize("classes", [1, 2])
def test_a_document_with_the_query_words_outscores_one_without(make_folder: Callable[..., Path], classes):
    reranker = CrossEncoderReranker.from_folder(make_folder(classes=classes))
    match, other = reranker.score(QUERY, [MATCH, OTHER])
    assert match > other
    assert reranker.max_length == DEFAULT_MAX_LENGTH and reranker.provider == "local"


def test_batches_give_the_scores_of_single_pairs_in_input_order(folder: Path):
    reranker = CrossEncoderReranker.from_folder(folder)
    documents = [f"{'note ' * (i % 9)}{MATCH if i % 5 == 0 else OTHER} {i}" for i in range(37)]
    calls = reranker.calls
    together = reranker.score(QUERY, documents)
    assert reranker.calls - calls == 3  # 37 pairs in batches of 16
    alone = [reranker.score(QUERY, [d])[0] for d in documents]
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-3)
    assert len(set(np.round(together, 3))) > 30  # distinct scores: a mixed-up order would not pass the check above
    assert reranker.score(QUERY, []) == []


def test_pairs_are_cut_at_the_length_in_config_json(make_folder: Callable[..., Path]):
    short = CrossEncoderReranker.from_folder(make_folder({"config.json": '{"max_position_embeddings": 24}'}))
    full = CrossEncoderReranker.from_folder(make_folder())
    assert short.max_length == 24 and full.max_length == DEFAULT_MAX_LENGTH
    filler = "nothing to see here " * 20
    late_match, no_match = filler + MATCH, filler + OTHER
    assert full.score(QUERY, [late_match])[0] > full.score(QUERY, [no_match])[0] + 10
    # Cut at 24 tokens, both documents end inside the filler: the model sees the same pair.
    np.testing.assert_allclose(*short.score(QUERY, [late_match, no_match]), rtol=1e-5)
    assert short.fingerprint != full.fingerprint  # max length is part of the identity


def test_length_from_tokenizer_config_and_a_model_without_token_types(make_folder: Callable[..., Path]):
    folder = make_folder(
        {"tokenizer_config.json": '{"model_max_length": 64}', "config.json": '{"max_position_embeddings": 514}'},
        inputs=("input_ids", "attention_mask"),
    )
    reranker = CrossEncoderReranker.from_folder(folder)
    assert reranker.max_length == 64
    assert reranker.score(QUERY, [MATCH, OTHER]) == [0.0, 0.0]  # fed only the inputs it declares
    sentinel = make_folder({"tokenizer_config.json": json.dumps({"model_max_length": 1e30})})
    assert CrossEncoderReranker.from_folder(sentinel).max_length == DEFAULT_MAX_LENGTH


def test_loaded_once_and_reloaded_when_the_model_changes(make_folder: Callable[..., Path]):
    folder = make_folder()
    first = CrossEncoderReranker.from_folder(folder)
    assert CrossEncoderReranker.from_folder(str(folder)) is first
    onnx.save(tiny_cross_encoder(classes=2), folder / "model.onnx")
    again = CrossEncoderReranker.from_folder(folder)
    assert again is not first and again.fingerprint != first.fingerprint
    assert first not in CrossEncoderReranker._loaded.values()  # the old model is not kept alive


def test_the_factory_loads_the_folder_named_by_rerank_model(folder: Path, tmp_path: Path):
    config = load_config(workspace=tmp_path, env={}, overrides={"rerank.model": str(folder)}).rerank
    reranker = create_reranker(config)
    assert isinstance(reranker, CrossEncoderReranker) and reranker.model == str(folder.resolve())


def test_missing_and_broken_files_are_named(make_folder: Callable[..., Path], tmp_path: Path):
    with pytest.raises(RerankError, match=re.escape(f"rerank.model: {tmp_path / 'nowhere'} is not a folder")):
        CrossEncoderReranker.from_folder(tmp_path / "nowhere")
    with pytest.raises(RerankError, match=re.escape(f"no model.onnx in {tmp_path}")):
        CrossEncoderReranker.from_folder(tmp_path)
    folder = make_folder()
    (folder / "tokenizer.json").unlink()
    with pytest.raises(RerankError, match=re.escape(f"no tokenizer.json in {folder}")):
        CrossEncoderReranker.from_folder(folder)
    folder = make_folder({"config.json": "{not json"})
    with pytest.raises(RerankError, match=re.escape(f"{folder / 'config.json'} is not a readable JSON object")):
        CrossEncoderReranker.from_folder(folder)
    folder = make_folder()
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(RerankError, match=re.escape(f"{folder / 'tokenizer.json'} cannot be read")):
        CrossEncoderReranker.from_folder(folder)
    folder = make_folder()
    (folder / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(RerankError, match=re.escape(f"{folder / 'model.onnx'} is not a model onnxruntime can load")):
        CrossEncoderReranker.from_folder(folder)


def test_a_model_that_is_not_a_cross_encoder_is_refused(make_folder: Callable[..., Path]):
    folder = make_folder(inputs=("input_ids", "attention_mask", "token_type_ids", "pixel_values"))
    with pytest.raises(RerankError, match="takes inputs attention_mask, input_ids, pixel_values, token_type_ids"):
        CrossEncoderReranker.from_folder(folder)
    reranker = CrossEncoderReranker.from_folder(make_folder(classes=3))
    with pytest.raises(RerankError, match=r"answered shape \[2, 3\] for 2 pairs"):
        reranker.score(QUERY, [MATCH, OTHER])
