//! Numbers that must not depend on the CPU: the classifier's int8 probabilities with the page's
//! kernels, computed here and on an emulated CPU without AVX-512 (QEMU's user mode as an AMD
//! EPYC Milan, Zen 3: AVX2 and FMA, the CPU of the machines whose browser test once failed), where
//! burn's CPU kernels and ours take their AVX2 paths. The browser test holds the page to native's
//! numbers on the machine that runs it; this holds native's to the same numbers on both kinds of
//! x86-64 CPU, so that an AVX-512 machine catches what would fail on an AVX2 one.

use std::process::Command;

use flipside_backend::model_dirs::compact_model_dir;
use flipside_backend::server::downloads::CLASSIFIER_BITS;

use crate::common::{CORPUS, ITEMS, editing_setup, flipside, success};

/// QEMU's CPU model for an AVX2-only machine.
const AVX2_CPU: &str = "EPYC-Milan";

/// `qemu-x86_64`, or `None` when it is not installed, unless `FLIPSIDE_TEST_QEMU=required` (as
/// `scripts/test` sets after installing it).
fn qemu() -> Option<&'static str> {
    let installed = Command::new("qemu-x86_64")
        .arg("--version")
        .output()
        .is_ok();
    if !installed {
        assert!(
            std::env::var("FLIPSIDE_TEST_QEMU").as_deref() != Ok("required"),
            "FLIPSIDE_TEST_QEMU=required but qemu-x86_64 is not installed (apt-get install qemu-user)"
        );
        eprintln!("skipped: qemu-x86_64 is not installed (apt-get install qemu-user)");
    }
    installed.then_some("qemu-x86_64")
}

/// `command` run on the emulated AVX2 CPU.
fn on_avx2(command: &Command, qemu: &str) -> Command {
    let mut emulated = Command::new(qemu);
    emulated
        .args(["-cpu", AVX2_CPU])
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => emulated.env(key, value),
            None => emulated.env_remove(key),
        };
    }
    emulated
}

/// On an AVX2-only host both runs take the same paths; the test has its teeth on AVX-512 ones.
/// It compares the classifier's output, head included: the head's f32 products (gemm, with
/// fused multiply-adds on both CPUs) sum in the same order on AVX2 and AVX-512.
#[cfg(target_arch = "x86_64")]
#[test]
fn page_kernel_probabilities_are_the_same_bits_without_avx512() {
    let Some(qemu) = qemu() else { return };
    let setup = editing_setup();
    // The classifier as the page downloads it.
    let compact = setup.dir.path().join("compact");
    compact_model_dir(&setup.classifier, &compact, CLASSIFIER_BITS).unwrap();
    let texts: Vec<&str> = ITEMS
        .lines()
        .skip(1)
        .filter_map(|line| line.rsplit_once(',').map(|(text, _)| text))
        .chain(CORPUS.lines())
        .collect();
    let input = setup.dir.path().join("texts.txt");
    std::fs::write(&input, texts.join("\n")).unwrap();
    let predict = |kernel: Option<&str>| {
        let mut command = flipside();
        command
            .args([
                "classifier",
                "predict",
                "--json",
                "--batch-size",
                "1",
                "--int8",
            ])
            .arg("--model")
            .arg(&compact)
            .env("RUST_LOG", "info");
        match kernel {
            Some(kernel) => command
                .args(["--int8-kernel", kernel, "--input"])
                .arg(&input),
            // Only to read which kernel it chose.
            None => command.arg(texts[0]),
        };
        command
    };

    // The emulated CPU has no AVX-512: the fastest kernel there is AVX2's.
    let output = on_avx2(&predict(None), qemu).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("with the AVX2 kernel"), "{stderr}");

    for kernel in ["simd128", "relaxedsimd"] {
        let native = success(&mut predict(Some(kernel)));
        let avx2 = success(&mut on_avx2(&predict(Some(kernel)), qemu));
        assert_eq!(native.lines().count(), texts.len());
        assert_eq!(native, avx2, "{kernel}: here and on {AVX2_CPU}");
    }
}
