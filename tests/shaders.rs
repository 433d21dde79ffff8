//! Every kernel as the engine compiles it (`shaders/common.wgsl` followed by its own file,
//! composed at build time) parses and validates with naga, so a shader error fails fast with the
//! file and line it comes from.
#![cfg(not(target_arch = "wasm32"))] // native tests; the browser's are in tests/web.rs

use std::path::Path;

use attnscope::engine::gpu::Kernel;

/// `file:line` of a line of a kernel's composed module.
fn origin(kernel: Kernel, common: &str, line: u32) -> String {
    // composed = common + "\n" + kernel
    let common_lines = common.matches('\n').count() as u32 + 1;
    if line <= common_lines {
        format!("shaders/common.wgsl:{line}")
    } else {
        format!("shaders/{}:{}", kernel.file(), line - common_lines)
    }
}

#[test]
fn every_composed_kernel_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let common = std::fs::read_to_string(dir.join("common.wgsl")).unwrap();
    for kernel in Kernel::ALL {
        let own = std::fs::read_to_string(dir.join(kernel.file())).unwrap();
        let src = kernel.source();
        assert_eq!(
            src,
            format!("{common}\n{own}"),
            "{}: not composed as common.wgsl + the file",
            kernel.file()
        );
        let name = format!("common.wgsl + {}", kernel.file());
        let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| {
            let at = e
                .location(src)
                .map(|l| origin(kernel, &common, l.line_number));
            panic!(
                "{}: {}",
                at.unwrap_or(name.clone()),
                e.emit_to_string_with_path(src, &name)
            )
        });
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| {
            let at = e
                .location(src)
                .map(|l| origin(kernel, &common, l.line_number));
            panic!(
                "{}: {}",
                at.unwrap_or(name.clone()),
                e.emit_to_string_with_path(src, &name)
            )
        });
        assert!(
            module.entry_points.iter().any(|e| e.name == "main"),
            "{name}: no `main` entry point"
        );
    }
}

#[test]
fn every_shader_file_is_a_kernel_or_the_prelude() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            file == "common.wgsl" || Kernel::ALL.iter().any(|k| k.file() == file),
            "shaders/{file} is neither common.wgsl nor a kernel's file"
        );
    }
}
