//! Padded rows for plain shared-memory variables read in a wgmma fragment's order
//! (`passes::bank_pad`, docs/language.md "Padded rows"): which variables get a pitch, that the
//! shared-memory plan counts it, and that padding never costs a resident CTA. The GPU equality
//! of padded tiles with the interpreter is the check case gathers_r100
//! (`scripts/h200-prepare.sh`), whose `band` and `ks` are padded.

use tilec::backend::Target;
use tilec::frontend::{check_source, Options};
use tilec::layout::bank::FragRead;

/// `(variable, pitch)` of every padded variable of every kernel on sm_90a, and each kernel's
/// shared-memory bytes and resident CTAs.
fn padded(src: &str) -> (Vec<(String, u32)>, Vec<(u32, u32)>) {
    let c = check_source(src, &Options { deny_warnings: false, targets: vec![Target::Sm90a], ..Options::default() });
    assert!(c.ok(), "{:?}", c.diags);
    let (mut vars, mut sizes) = (vec![], vec![]);
    for pk in c.kernels() {
        let tp = pk.target(Target::Sm90a).expect("sm_90a plan");
        for (v, d) in pk.kernel.vars.iter() {
            if let Some(p) = tp.pitch_of(v) {
                vars.push((d.name.clone(), p));
            }
        }
        sizes.push((tp.smem_bytes(), tp.resident_ctas(pk.kernel.threads)));
    }
    (vars, sizes)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)).expect("source")
}

#[test]
fn fragment_order_reads_get_the_pitch_of_the_bank_model() {
    // gathers.tile: `band` f32 [64, 16] read as a column per row (`band[:, j]`): 80-byte rows;
    // `ks` bf16 [80, 32] read a pair per thread: 80-byte rows. `sum` and `idx` are read by CTA
    // loops only; `gather_trap`'s `t` is read by a store of no register accumulator.
    let (vars, _) = padded(&read("tests/gpu/gathers.tile"));
    assert_eq!(vars, vec![("band".to_string(), 20), ("ks".to_string(), 40)]);
}

#[test]
fn the_per_channel_kernels_pad_their_gate_and_key_tiles() {
    // dqkwg_channel's f32 [*, 32] tiles read a pair per thread take rows 40 elements (160
    // bytes) apart; its bands, read a column per row, 20 (80 bytes).
    let (vars, _) = padded(&read("dsl-examples/gdn_channel.tile"));
    let pitch = |n: &str| vars.iter().find(|(v, _)| v == n).map(|x| x.1);
    assert_eq!([pitch("gx"), pitch("qx"), pitch("kx"), pitch("eb"), pitch("band"), pitch("bandt")], [Some(40), Some(40), Some(40), Some(40), Some(20), Some(20)]);
    // The operand tiles keep their swizzled layouts.
    assert_eq!([pitch("aqh"), pitch("bkh"), pitch("dsh")], [None, None, None]);
}

/// A kernel whose f32 [64, 32] tile `xs` is read in fragment order (pairs and one column) beside
/// an `n`-row f32 [n, 64] tile, optionally declaring two CTAs per SM.
fn beside(n: u32, declared: bool) -> String {
    let res = if declared { " ctas_per_sm(sm_90a: 2)" } else { "" };
    format!(
        "kernel t(a: f32[{n}, 64], x: f32[64, 32], y: out f32[64, 32], z: out f32[{n}, 64]) grid(1) threads(256){res} {{
            let big: smem = load a[:, :];
            let xs: smem = load x[:, :];
            let mut acc: tmem f32[64, 32] = zeros(64, 32);
            acc += xs[:, 0..+32] * 2.0 + xs[:, 3];
            store y[:, :] = acc;
            store z[:, :] = big + 1.0;
        }}"
    )
}

#[test]
fn padding_never_costs_a_resident_cta() {
    // Two CTAs per SM fit 2 · (bytes + 1 KiB reserved) ≤ 233,472 bytes: at most 115,712 bytes
    // each. 400 rows: 102,400 + 8,192 · 5/4 (rows of 160 bytes for 128) = 112,640 — padded.
    // 416 rows: 106,496 + 10,240 would be 116,736, one CTA per SM; unpadded 114,688 keeps two.
    for declared in [false, true] {
        let (vars, sizes) = padded(&beside(400, declared));
        assert_eq!((vars, sizes), (vec![("xs".to_string(), 40)], vec![(112_640, 2)]));
        let (vars, sizes) = padded(&beside(416, declared));
        assert_eq!((vars, sizes), (vec![], vec![(114_688, 2)]));
    }
}

#[test]
fn a_padded_tile_loaded_element_by_element_still_uses_cp_async() {
    // x[:, :, 1] has no 16-byte chunk (its elements are 16 bytes apart): each element is one
    // 4-byte `cp.async.ca`, at its padded place — rows `pitch` elements apart, the pitch of the
    // bank model for a pair and a column read of an f32 [_, 32] tile.
    let src = "kernel t(x: f32[64, 32, 4], y: out f32[64, 32]) grid(1) threads(256) {
        let xs: smem = load x[:, :, 1];
        let mut acc: tmem f32[64, 32] = zeros(64, 32);
        acc += xs * 2.0 + xs[:, 3];
        store y[:, :] = acc;
    }";
    let pitch = tilec::layout::bank::fragment_pitch(32, 4, &[FragRead::Pairs, FragRead::Column]).expect("padded");
    assert_eq!(padded(src).0, vec![("xs".to_string(), pitch)]);
    let opts = tilec::build::BuildOptions { write_llvm: true, ..tilec::build::BuildOptions::ptx_only(vec![Target::Sm90a]) };
    let r = tilec::build::build_source(src, "t.tile", &opts).expect("builds");
    let ll = r.built[0].compiled.llvm_ir.as_deref().expect("LLVM IR asked for");
    let lines: Vec<&str> = ll.lines().collect();
    let at = lines.iter().position(|l| l.contains("call void @llvm.nvvm.cp.async.ca.shared.global.4.s")).expect("an element cp.async");
    // Its shared-memory address: (r · pitch + c) · 4.
    assert!(lines[at.saturating_sub(8)..at].iter().any(|l| l.trim_end().ends_with(&format!("mul i32 %r, {pitch}"))), "{}", lines[at.saturating_sub(8)..=at].join("\n"));
}
