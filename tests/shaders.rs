//! Every kernel as the engine compiles it (`shaders/common.wgsl` followed by its own file,
//! composed at build time) parses and validates with naga, so a shader error fails fast with the
//! file and line it comes from.

use std::path::Path;

use attnscope::engine::gpu::Kernel;

/// `file:line` of a line of a composed module, from its parts (`(file, text)`, in order).
fn origin(parts: &[(&str, String)], line: u32) -> String {
    // composed = part + "\n" + part + ...: each part takes its newlines + 1 lines
    let mut first = 1;
    for (file, text) in parts {
        let lines = text.matches('\n').count() as u32 + 1;
        if line < first + lines {
            return format!("shaders/{file}:{}", line - first + 1);
        }
        first += lines;
    }
    format!("line {line}")
}

#[test]
fn every_composed_kernel_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let common = std::fs::read_to_string(dir.join("common.wgsl")).unwrap();
    for kernel in Kernel::ALL {
        let mut parts = vec![("common.wgsl", common.clone())];
        for file in kernel.files() {
            parts.push((file, std::fs::read_to_string(dir.join(file)).unwrap()));
        }
        let src = kernel.source();
        let texts: Vec<&str> = parts.iter().map(|(_, t)| t.as_str()).collect();
        let name = parts
            .iter()
            .map(|(f, _)| *f)
            .collect::<Vec<_>>()
            .join(" + ");
        assert_eq!(
            src,
            texts.join("\n"),
            "{}: not composed as {name}",
            kernel.file()
        );
        assert_eq!(kernel.files().last(), Some(&kernel.file()));
        let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| {
            let at = e.location(src).map(|l| origin(&parts, l.line_number));
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
            let at = e.location(src).map(|l| origin(&parts, l.line_number));
            panic!(
                "{}: {}",
                at.unwrap_or(name.clone()),
                e.emit_to_string_with_path(src, &name)
            )
        });
        assert!(
            module.entry_points.iter().any(|e| e.name == kernel.entry()),
            "{name}: no `{}` entry point",
            kernel.entry()
        );
    }
}

#[test]
fn every_shader_file_is_a_kernel_or_composed_into_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            file == "common.wgsl" || Kernel::ALL.iter().any(|k| k.files().contains(&&*file)),
            "shaders/{file} is neither common.wgsl nor composed into a kernel"
        );
    }
}
