//! Every `shaders/*.wgsl` parses and validates with naga, so a shader error fails fast with its
//! file and line.
#![cfg(not(target_arch = "wasm32"))] // native tests; the browser's are in tests/web.rs

#[test]
fn every_shader_parses_and_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("wgsl") {
            continue;
        }
        let name = path.display().to_string();
        let src = std::fs::read_to_string(&path).unwrap();
        let module = naga::front::wgsl::parse_str(&src)
            .unwrap_or_else(|e| panic!("{}", e.emit_to_string_with_path(&src, &name)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string_with_path(&src, &name)));
        assert!(
            module.entry_points.iter().any(|e| e.name == "main"),
            "{name}: no `main` entry point"
        );
        count += 1;
    }
    assert!(
        count >= 7,
        "expected the encoder's kernels in shaders/, found {count}"
    );
}
