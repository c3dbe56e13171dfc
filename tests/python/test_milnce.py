"""MIL-NCE from Python: the encoders, the loss against its formula, and a short training run on the
synthetic clip-text set that improves retrieval."""
import numpy as np

import tessera
from tessera import nn, optim
from tessera.data import DataLoader, load_clip_text, write_synthetic_clip_text


def test_the_loss_matches_its_formula():
    tessera.manual_seed(2)
    v, t = tessera.randn(4, 3), tessera.randn(4, 2, 3)
    loss = nn.functional.mil_nce_loss(v, t, temperature=0.5).item()
    vn, tn = v.numpy().astype(np.float64), t.numpy().astype(np.float64)
    s = np.einsum("id,jkd->ijk", vn, tn) / 0.5  # video i, clip j's candidate k
    expected = 0.0
    for i in range(4):
        pos = np.exp(s[i, i]).sum()
        neg = sum(np.exp(s[i, j]).sum() + np.exp(s[j, i]).sum() for j in range(4) if j != i)
        expected += -np.log(pos / (pos + neg))
    assert abs(loss - expected / 4) < 1e-4


def test_training_on_the_synthetic_set_improves_retrieval(tmp_path):
    write_synthetic_clip_text(str(tmp_path / "train"), clips=4000, seed=3, stream=0)
    write_synthetic_clip_text(str(tmp_path / "test"), clips=200, seed=3, stream=1)
    train, test = load_clip_text(str(tmp_path / "train")), load_clip_text(str(tmp_path / "test"))
    tessera.manual_seed(0)
    video, text = nn.VideoEncoder(feature_dim=128), nn.TextEncoder(vocab=500)
    opt = optim.Adam(video.parameters() + text.parameters(), lr=2e-3)

    def recall_at_10():
        with tessera.no_grad():
            return nn.text_to_video_retrieval(text(test.aligned_narrations()), video(test.features))["r10"]

    before = recall_at_10()
    for epoch in range(8):
        for clips, words in DataLoader(train, batch_size=128, shuffle=True, seed=epoch):
            loss = nn.functional.mil_nce_loss(video(clips), text(words), temperature=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = recall_at_10()
    assert after > before + 0.2 and after > 0.5, (before, after)
