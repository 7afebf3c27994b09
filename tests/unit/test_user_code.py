"""tasks/user_code.py and the python provider's adapters: what a user's function, class or model
object is turned into, what it may return, what is refused, and what its cache identity holds."""
from __future__ import annotations

import enum
import sys
import textwrap

import numpy as np
import pytest

from retbench.tasks.providers import create_provider
from retbench.tasks.providers.python_callable import PythonProvider, adapt
from retbench.tasks.rerankers.python_callable import PythonReranker
from retbench.tasks.user_code import (UserCodeError, as_matrix, code_digest, import_reference, reference_code_identity,
                                      split_reference)

TEXTS = ["alpha beta", "gamma", "delta epsilon zeta"]


def vectors_for(texts, role="document"):
    """A toy model: length, vowels, and a role flag, so a test sees which role was passed."""
    return np.array([[len(t), sum(c in "aeiou" for c in t), 1.0 if role == "query" else 2.0] for t in texts])


def test_a_function_of_texts_and_one_of_texts_and_role():
    plain = adapt(lambda texts: vectors_for(texts), {}, None, "p")
    with_role = adapt(lambda texts, role: vectors_for(texts, role), {}, None, "p")
    keyword_role = adapt(lambda texts, *, role="document", scale=1.0: scale * vectors_for(texts, role), {"scale": 2.0},
                         None, "p")
    assert plain.encode(TEXTS, "query")[:, 2].tolist() == [2.0] * 3  # no role parameter: never told
    assert with_role.encode(TEXTS, "query")[:, 2].tolist() == [1.0] * 3
    assert keyword_role.encode(TEXTS, "query")[0].tolist() == [20.0, 8.0, 2.0]  # kwargs on every call, role by name


def test_a_beir_object_gets_queries_as_strings_and_documents_as_dicts():
    seen = {}

    class Beir:
        def encode_queries(self, queries, batch_size, **kwargs):
            seen["queries"], seen["batch_size"] = queries, batch_size
            return vectors_for(queries, "query")

        def encode_corpus(self, corpus, batch_size=8, **kwargs):
            seen["corpus"] = corpus
            return vectors_for([d["title"] + d["text"] for d in corpus])

    encoder = adapt(Beir(), {}, None, "p")
    assert encoder.encode(TEXTS, "query")[:, 2].tolist() == [1.0] * 3 and seen["batch_size"] == 3
    encoder.encode(TEXTS[:1], "document")
    assert seen["corpus"] == [{"title": "", "text": "alpha beta"}]


class PromptType(str, enum.Enum):
    query = "query"
    passage = "passage"


def test_an_mteb_object_is_told_the_role_by_its_prompt_type_enum_and_gets_a_task_name():
    seen = []

    class Mteb:
        def encode(self, sentences, *, task_name: str, prompt_type: PromptType | None = None, **kwargs):
            seen.append((task_name, prompt_type))
            return vectors_for(sentences)

    encoder = adapt(Mteb(), {}, None, "p")
    encoder.encode(TEXTS, "query")
    encoder.encode(TEXTS, "document")
    assert seen == [("retbench", PromptType.query), ("retbench", PromptType.passage)]


def test_a_sentence_transformers_style_object_uses_its_role_methods_or_its_prompts():
    class Split:
        def encode_query(self, texts, show_progress_bar=True):
            assert show_progress_bar is False
            return vectors_for(texts, "query")

        def encode_document(self, texts, show_progress_bar=True):
            return vectors_for(texts)

        def encode(self, texts):
            raise AssertionError("encode_query/encode_document come first")

    class Prompts:
        prompts = {"query": "q: ", "passage": "p: "}

        def encode(self, texts, prompt_name=None):
            return vectors_for([(self.prompts.get(prompt_name, "")) + t for t in texts])

    assert adapt(Split(), {}, None, "p").encode(TEXTS, "query")[:, 2].tolist() == [1.0] * 3
    prompted = adapt(Prompts(), {}, None, "p")
    assert prompted.encode(["ab"], "query")[0, 0] == len("q: ab") and prompted.encode(["ab"], "document")[0, 0] == len("p: ab")


def test_a_class_and_a_factory_are_made_once_with_kwargs():
    made = []

    class Model:
        def __init__(self, dim):
            made.append(dim)
            self.dim = dim

        def encode(self, texts):
            return np.ones((len(texts), self.dim))

    def make_model(dim=2):
        return Model(dim)

    by_class = adapt(Model, {"dim": 5}, None, "p")
    by_factory = adapt(make_model, {"dim": 7}, None, "p")
    assert by_class.encode(TEXTS, "document").shape == (3, 5) and by_factory.encode(TEXTS, "query").shape == (3, 7)
    assert made == [5, 7]  # once each, not per call
    with pytest.raises(UserCodeError, match="kwargs are given but Model is already an object"):
        adapt(Model(3), {"dim": 4}, None, "p")


@pytest.mark.parametrize("returned, message", [
    (None, "returned None for 3 texts"),
    ([[1.0, 2.0], [1.0], [3.0, 4.0]], "ragged vectors: row 0 has 2 values, row 1 has 1"),
    (np.ones((2, 4)), "returned 2 vectors for 3 texts"),
    (np.ones(3), r"shaped \(3,\) for 3 texts; expected \(3, dim\)"),
    (np.array([[1.0, np.inf], [0, 1], [1, 0]]), r"non-finite value \(inf\) in row 0 of 3"),
    ("not vectors", "not numbers"),
    ([1, "x", 3], "item 0 is a int, not a vector"),
])
def test_what_comes_back_is_refused_naming_the_callable(returned, message):
    with pytest.raises(UserCodeError, match=message) as caught:
        as_matrix(returned, 3, "providers[1] ('mine'), callable m:f")
    assert str(caught.value).startswith("providers[1] ('mine'), callable m:f ")


def test_lists_arrays_and_tensors_are_all_vectors():
    torch = pytest.importorskip("torch")
    expected = np.arange(6, dtype=np.float32).reshape(3, 2)
    for value in (expected.tolist(), expected.astype(np.float16), torch.tensor(expected, dtype=torch.bfloat16),
                  [torch.tensor(row) for row in expected]):
        assert np.array_equal(as_matrix(value, 3, "p"), expected)


def test_a_raise_and_a_changed_dimension_are_one_line():
    def broken(texts):
        raise KeyError("tokenizer")

    with pytest.raises(UserCodeError, match=r"^p raised KeyError: 'tokenizer' \(on a batch of 3 query texts; --debug"):
        adapt(broken, {}, None, "p").encode(TEXTS, "query")
    sizes = iter([4, 4, 5])
    growing = adapt(lambda texts: np.ones((len(texts), next(sizes))), {}, None, "p")
    growing.encode(TEXTS, "document")
    growing.encode(TEXTS, "document")
    with pytest.raises(UserCodeError, match="returned 5-dimensional vectors after 4-dimensional ones"):
        growing.encode(TEXTS, "document")


def test_a_reference_is_module_colon_attribute():
    assert split_reference("pkg.mod:make.model") == ("pkg.mod", "make.model")
    for bad in ("pkg.mod", "pkg.mod:", ":f", "pkg-mod:f", "pkg.mod:f-g"):
        with pytest.raises(ValueError, match="module:attribute"):
            split_reference(bad)


def test_the_code_digest_ignores_docstrings_comments_and_layout_but_not_code():
    base = 'def f(texts):\n    """Embed."""\n    return [[1.0] for t in texts]\n'
    assert code_digest(base) == code_digest('def f( texts ):  # why\n    """Another docstring."""\n\n    return [[1.0] for t in texts]\n')
    assert code_digest(base) != code_digest(base.replace("1.0", "2.0"))


def _write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_the_identity_covers_the_users_imported_modules_not_installed_ones(tmp_path):
    _write(tmp_path, "helpers.py", '"""Helpers."""\nSCALE = 2.0\n')
    _write(tmp_path, "other.py", '"""Not imported by mine."""\nX = 1\n')
    _write(tmp_path, "mine.py", """\
        import numpy as np
        from helpers import SCALE

        def embed(texts):
            return np.ones((len(texts), 3)) * SCALE
        """)
    before = reference_code_identity("mine:embed", [tmp_path])
    _write(tmp_path, "helpers.py", '"""Helpers, reworded."""\nSCALE = 2.0\n')
    _write(tmp_path, "other.py", "X = 2\n")
    assert reference_code_identity("mine:embed", [tmp_path]) == before  # a docstring; a module it does not import
    _write(tmp_path, "helpers.py", "SCALE = 3.0\n")
    assert reference_code_identity("mine:embed", [tmp_path]) != before  # the code it runs changed
    assert reference_code_identity("json:dumps", [tmp_path]) is None  # the standard library is not the user's


def test_the_spec_folder_comes_before_sys_path_and_edited_code_is_imported_again(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    _write(first, "shadowed_model.py", "def embed(texts):\n    return [[1.0]] * len(texts)\n")
    _write(second, "shadowed_model.py", "def embed(texts):\n    return [[2.0]] * len(texts)\n")
    sys.path.append(str(second))
    try:
        assert import_reference("shadowed_model:embed", [first], "p")(["x"]) == [[1.0]]
        assert import_reference("shadowed_model:embed", [second], "p")(["x"]) == [[2.0]]  # another folder's module
        _write(second, "shadowed_model.py", "def embed(texts):\n    return [[3.0]] * len(texts)\n")
        assert import_reference("shadowed_model:embed", [second], "p")(["x"]) == [[3.0]]  # edited on disk
    finally:
        sys.path.remove(str(second))
        sys.modules.pop("shadowed_model", None)


def test_missing_modules_and_attributes_are_named(tmp_path):
    _write(tmp_path, "present.py", "def embed(texts):\n    return []\n")
    with pytest.raises(UserCodeError, match=r"module 'absent_module' not found \(searched .*then sys.path\)"):
        import_reference("absent_module:embed", [tmp_path], "providers[0]")
    with pytest.raises(UserCodeError, match=r"'present' has no attribute 'embedd' \(it has: embed\)"):
        import_reference("present:embedd", [tmp_path], "providers[0]")
    _write(tmp_path, "crashes_on_import.py", "raise RuntimeError('no GPU')\n")
    with pytest.raises(UserCodeError, match="importing 'crashes_on_import' raised RuntimeError: no GPU"):
        import_reference("crashes_on_import:f", [tmp_path], "providers[0]")


def test_editing_the_file_changes_the_fingerprint_and_the_vectors_of_one_provider_object(tmp_path):
    _write(tmp_path, "edited.py", "def embed(texts):\n    return [[1.0, 0.0]] * len(texts)\n")
    provider = create_provider("python", {"callable": "edited:embed", "search_path": [str(tmp_path)]})
    first = provider.fingerprint()
    assert provider.encode(["x"], "query").tolist() == [[1.0, 0.0]]
    _write(tmp_path, "edited.py", "def embed(texts):\n    return [[0.0, 1.0]] * len(texts)\n")
    assert provider.fingerprint()["code"] != first["code"]
    assert provider.encode(["x"], "query").tolist() == [[0.0, 1.0]]  # a long-lived worker runs the new code
    sys.modules.pop("edited", None)


def test_a_live_object_is_identified_by_its_code_and_by_what_it_returns():
    def model_a(texts):
        return np.tile([1.0, 0.5, 0.0], (len(texts), 1))

    weights = {"w": np.array([0.0, 0.5, 1.0])}

    def model_b(texts):  # same code for two "weights": only the probe tells them apart
        return np.tile(weights["w"], (len(texts), 1))

    a = PythonProvider.for_object(model_a, "a").fingerprint()
    b1 = PythonProvider.for_object(model_b, "b").fingerprint()
    weights["w"] = np.array([1.0, -0.5, 0.2])
    b2 = PythonProvider.for_object(model_b, "b").fingerprint()
    assert a["code"] != b1["code"] and b1["code"] == b2["code"] and b1["probe"] != b2["probe"]
    assert PythonProvider.for_object(model_b, "b").fingerprint() == b2  # and stable for the same object


def test_threads_run_calls_at_once_and_hand_results_over_by_batch(tmp_path):
    provider = PythonProvider.for_object(lambda texts: vectors_for(texts), "t", threads=3)
    batches = [[f"text {i}" * (i + 1)] for i in range(7)]
    results = dict(provider.encode_batches(batches, "document"))
    assert sorted(results) == list(range(7))
    assert all(results[i].vectors[0, 0] == len(batches[i][0]) for i in range(7))


def test_a_python_reranker_takes_a_score_function_or_a_predict_object():
    def overlap(query, documents):
        return [len(set(query.split()) & set(d.split())) for d in documents]

    class CrossEncoderLike:
        def predict(self, pairs, show_progress_bar=True):
            return np.array([float(len(q) - len(d)) for q, d in pairs])

    pairs = [("a b", "a c"), ("x", "y z"), ("a b", "a b")]
    scored = PythonReranker(object=_live(overlap)).score_pairs(pairs).scores
    assert scored.tolist() == [1.0, 0.0, 2.0]  # per query, back in the pairs' order
    assert PythonReranker(object=_live(CrossEncoderLike())).score_pairs(pairs).scores.tolist() == [-0.0, -2.0, 0.0]
    with pytest.raises(UserCodeError, match="returned 1 scores for 2 documents"):
        PythonReranker(object=_live(lambda q, docs: [1.0])).score("q", ["a", "b"])


def _live(obj):
    from retbench.tasks.user_code import keep_live

    return keep_live(obj, "test")


def test_a_secret_goes_through_the_environment_never_into_the_identity_or_a_message(monkeypatch):
    with pytest.raises(ValueError, match=r"kwargs.api_key looks like a secret.*secret_kwargs: \{api_key: ENV_VARIABLE\}"):
        create_provider("python", {"callable": "m:f", "kwargs": {"api_key": "sk-live-123456"}})
    seen = {}

    def make_client(api_key, model="small"):
        seen["key"] = api_key

        def embed(texts):
            raise ConnectionError(f"401 for key {api_key}")

        return embed

    from retbench.tasks.providers.secrets import SecretLookupError

    monkeypatch.delenv("OUR_EMBED_KEY", raising=False)
    provider = PythonProvider.for_object(make_client, "client", kwargs={"model": "small"},
                                         secret_kwargs={"api_key": "OUR_EMBED_KEY"}, where="providers[0] ('client')")
    with pytest.raises(SecretLookupError, match="OUR_EMBED_KEY is not set"):
        provider.encode(["x"], "query")
    monkeypatch.setenv("OUR_EMBED_KEY", "sk-live-123456")
    provider = PythonProvider(**{**provider.options.model_dump(), "where": "providers[0] ('client')"})
    with pytest.raises(UserCodeError) as refused:
        provider.encode(["x"], "query")
    assert seen["key"] == "sk-live-123456" and "sk-live" not in str(refused.value) and "401 for key ***" in str(refused.value)
    assert provider.options.identity("python")["secret_kwargs"] == ["api_key"]
    assert "sk-live" not in str(provider.options.identity("python"))
