"""A model hub id given as --model gets a line that says only local paths are read, and how to get one."""
import pytest

from anydev.core.loading.checkpoint import ModelLoadError, open_checkpoint


def test_a_hub_id_is_named_as_one_with_the_way_to_download_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        open_checkpoint("meta-llama/Llama-3.2-1B")
    message = str(info.value)
    assert "does not exist" in message and "hub id" in message and "only local files" in message
    assert "huggingface-cli download meta-llama/Llama-3.2-1B" in message and "\n" not in message


@pytest.mark.parametrize("path", ["/models/llama", "./org/name", "a/b/c"])
def test_a_path_that_is_not_shaped_like_a_hub_id_gets_no_hint(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError) as info:
        open_checkpoint(path)
    assert "does not exist" in str(info.value) and "hub id" not in str(info.value)
