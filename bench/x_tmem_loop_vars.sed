# sed script for scripts/h200-ab.sh prepare-x (docs/results.md, twenty-seventh session): the per-channel
# distance loops' loop-carried [C, BKQ] tiles declared tmem (registers on sm_90a), two CTAs per SM kept.
s/let mut \(am\|dqs\) = zeros(C, BKQ);/let mut \1: tmem f32[C, BKQ] = zeros(C, BKQ);/
s/let mut \(ei\|ej\) = full(C, BKQ, 1.0); /let mut \1: tmem f32[C, BKQ] = full(C, BKQ, 1.0);/
s/) grid(NS, B \* H \* G, K \/ BKQ) threads(TPC)$/) grid(NS, B * H * G, K \/ BKQ) threads(TPC) ctas_per_sm(sm_90a: 2)/
