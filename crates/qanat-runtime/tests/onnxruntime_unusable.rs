//! A file that is not an ONNX Runtime library makes the onnxruntime runtime unavailable
//! with the reason; the process goes on (its own test binary: a process loads one
//! library, once).

use qanat_runtime::onnx::onnxruntime::{self, OrtModel};

#[test]
fn a_broken_library_makes_the_runtime_unavailable_and_the_process_goes_on() {
    let dir = tempfile::tempdir().expect("tmp");
    let lib = dir.path().join("libonnxruntime.so");
    std::fs::write(&lib, b"\x7fELF but not really a library").expect("write");
    onnxruntime::configure(&lib);
    for _ in 0..2 {
        let e = OrtModel::load(b"", 1).expect_err("unavailable");
        assert!(matches!(e, qanat_runtime::Error::Unavailable(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("cannot be used") && text.contains("libonnxruntime.so"),
            "{text}"
        );
    }
    assert_eq!(
        qanat_core::DomainError::kind(&OrtModel::load(b"", 1).expect_err("x")),
        qanat_core::ErrorKind::Unavailable
    );
}
