#!/bin/bash
# The device call that trains both pagoda-tiny models (docs/models.md, "Retraining"):
#   tools/train/run_device.sh CORPORA_DIR OUT_DIR SECONDS
# trains the tokenizer, then the GQA (llama) and MLA models side by side on one GPU for
# SECONDS of optimizer steps each, exports them, and packs what comes back into OUT_DIR.
set -euo pipefail
C=$1; O=$2; S=${3:-360}
W=/tmp/pagoda-tiny
export PYTHONUNBUFFERED=1
mkdir -p "$W" "$O"
nvidia-smi --query-gpu=name,memory.used --format=csv || true
python3 tools/train/train.py tokenizer --corpora "$C" --out "$W"
for arch in llama mla; do
  python3 tools/train/train.py train --arch $arch --corpora "$C" --tokenizer "$W/tokenizer.json" \
    --out "$W/$arch" --seconds "$S" > "$W/$arch.log" 2>&1 &
done
fail=0
for j in $(jobs -p); do wait "$j" || fail=1; done
tail -n 40 "$W/llama.log" "$W/mla.log"
cp "$W/llama/pagoda-tiny.gguf" "$O/" || true
(cd "$W/llama" && tar cf "$O/llama-hf.tar" hf) || true
(cd "$W/mla" && tar cf "$O/mla-hf.tar" hf) || true
(cd "$W" && tar czf "$O/runs.tar.gz" tokenizer.json llama.log mla.log \
   llama/loss.csv llama/summary.json llama/golden-* mla/loss.csv mla/summary.json mla/golden-*) || true
ls -la "$O"
exit $fail
