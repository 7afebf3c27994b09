"""`device:` through the real command line: a device this host lacks is refused by `retbench check`
and `retbench run` in one line naming the spec key and what the host has (exit 2, before any work);
on the CPU a run says which engine embedded and why, in its log and its manifest."""
import json

import pytest

from tests.pipeline.test_cli_errors import retbench, tiny_collection, write_spec


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _has_mps() -> bool:
    import torch

    return torch.backends.mps.is_available()


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory):
    return tmp_path_factory.mktemp("prefect-home")


@pytest.mark.skipif(_has_cuda(), reason="this host has a CUDA device: nothing to refuse")
def test_cuda_on_a_host_without_it_is_one_line_from_check_and_run(tmp_path, prefect_home):
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, provider="{name: h, kind: hashing}, "
                                         "{name: gpu, kind: sentence-transformers, options: {device: cuda}}")
    from retbench.tasks.devices import host_has

    message = (f"retbench: providers[1].options.device ('gpu', kind sentence-transformers) is cuda, but this host has "
               f"no CUDA device ({host_has()}); set device: cpu, or run on a host with a CUDA device")
    assert "torch sees no CUDA" in message
    for command in ("check", "run"):
        done = retbench(command, spec, cwd=tmp_path, prefect_home=prefect_home)
        assert (done.returncode, done.stderr, done.stdout) == (2, message + "\n", ""), command
    debug = retbench("run", spec, "--debug", cwd=tmp_path, prefect_home=prefect_home)
    assert debug.returncode == 2 and debug.stderr.startswith("Traceback") and debug.stderr.splitlines()[-1] == message
    assert "DeviceUnavailable" in debug.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / "out").exists()  # refused before any work


@pytest.mark.skipif(_has_mps(), reason="this host has an MPS device: nothing to refuse")
def test_mps_and_a_cross_encoder_on_cuda_are_refused_by_check(tmp_path, prefect_home):
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, provider="{name: mac, kind: sentence-transformers, options: {device: mps}}")
    done = retbench("check", spec, cwd=tmp_path, prefect_home=prefect_home)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("retbench: providers[0].options.device ('mac', kind sentence-transformers) is mps, "
                                  "but this host has none (torch sees no")
    assert done.stderr.endswith("; set device: cpu, or run on a host with an MPS device\n")
    if _has_cuda():
        return
    model = tmp_path / "cross-encoder"
    model.mkdir()
    spec.write_text(spec.read_text().replace("options: {device: mps}", "") + (
        f"rerankers: [{{name: ce, kind: cross-encoder, options: {{model: {model}, device: 'cuda:0'}}}}]\n"
        "systems: [{name: reranked, first: mac/flat, rerank: ce, top_n: 20}]\n"))
    done = retbench("check", spec, cwd=tmp_path, prefect_home=prefect_home)
    assert done.returncode == 2 and done.stderr.startswith(
        "retbench: rerankers[0].options.device ('ce', kind cross-encoder) is cuda:0, but this host has no CUDA device")


@pytest.mark.slow  # starts a real Prefect API server and embeds with the packaged model
def test_a_cpu_run_logs_and_records_its_engine(tmp_path, prefect_home):
    tiny_collection(tmp_path / "data")
    spec = write_spec(tmp_path, provider="{name: minilm, kind: sentence-transformers}")
    done = retbench("run", spec, cwd=tmp_path, prefect_home=prefect_home)
    assert done.returncode == 0, done.stderr
    reason = ("auto on cpu: ONNX Runtime's CPU engine, faster than torch there, as the model's structure allows it "
              "(Transformer + Pooling (+ Normalize))")
    assert f"minilm: backend onnx on cpu (ONNX Runtime, CPUExecutionProvider): {reason}\n" in done.stdout + done.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["engines"] == {"minilm": {"backend": "onnx", "device": "cpu", "execution_provider": "CPUExecutionProvider",
                                              "reason": reason}}
    assert "engine" not in manifest["providers"]["minilm"]  # the fingerprint, which the history hashes, is untouched
