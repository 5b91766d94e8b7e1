//! Prints the CustomResourceDefinitions of agenthooks.io as a multi-document YAML stream.
//!
//! `crdgen` writes to stdout; `crdgen --write` writes `config/crd/agenthooks.yaml` and
//! `charts/agenthooks/crds/agenthooks.yaml` under the current directory (the workspace
//! root). A test fails when the committed files differ from what this prints.

fn main() {
    let yaml = agenthooks_crds::crd_yaml();
    if std::env::args().any(|a| a == "--write") {
        for path in agenthooks_crds::CRD_PATHS {
            if let Some(dir) = std::path::Path::new(path).parent() {
                std::fs::create_dir_all(dir).expect("create CRD directory");
            }
            std::fs::write(path, &yaml).unwrap_or_else(|e| panic!("write {path}: {e}"));
            eprintln!("wrote {path}");
        }
    } else {
        print!("{yaml}");
    }
}
