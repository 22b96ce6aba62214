use super::*;
use std::os::unix::fs::symlink;

fn rule(domain: &str) -> String {
    format!(
            "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n"
        )
}

fn write(path: &Path, contents: &str) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("create parent");
    }
    fs::write(path, contents).expect("write file");
}

fn watch_root(root: &Path, sub: &str) -> ProviderOptions {
    ProviderOptions {
        runtime_root: root.to_path_buf(),
        subdirectory: sub.to_string(),
        ..ProviderOptions::default()
    }
}

fn directory(root: &Path, sub: &str) -> ProviderOptions {
    ProviderOptions {
        runtime_root: root.to_path_buf(),
        subdirectory: sub.to_string(),
        watch_root: false,
        ..ProviderOptions::default()
    }
}

fn names(opts: &ProviderOptions) -> Vec<String> {
    collect(opts)
        .expect("collect")
        .into_iter()
        .map(|f| f.name)
        .collect()
}

#[test]
fn defaults_are_the_originals() {
    let d = ProviderOptions::default();
    assert_eq!(d.runtime_root, PathBuf::from("/srv/runtime_data/current"));
    assert_eq!(d.subdirectory, "");
    assert_eq!(d.app_directory, "config");
    assert!(!d.ignore_dotfiles);
    assert!(d.watch_root);
    assert!(!d.merge_domains);
}

#[test]
fn watch_root_names_are_dotted_relative_paths_with_the_app_prefix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sub = tmp.path().join("rl");
    write(&sub.join("config/basic.yaml"), &rule("a"));
    write(&sub.join("config/sub/x.yaml"), &rule("b"));
    write(&sub.join("config.yaml"), &rule("c"));
    write(&sub.join("config.d/y.yaml"), &rule("d"));
    write(&sub.join("other/z.yaml"), &rule("e"));
    write(&sub.join("configuration.yaml"), &rule("f"));
    write(&sub.join("README"), "not a rule file");
    assert_eq!(
        names(&watch_root(tmp.path(), "rl")),
        [
            "config.basic.yaml",
            "config.d.y.yaml",
            "config.sub.x.yaml",
            "config.yaml"
        ]
    );
}

#[test]
fn watch_root_subdirectory_may_be_nested_and_absolute_looking() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("a/b/config/x.yaml"), &rule("a"));
    assert_eq!(names(&watch_root(tmp.path(), "a/b")), ["config.x.yaml"]);
    assert_eq!(names(&watch_root(tmp.path(), "/a/b")), ["config.x.yaml"]);
}

#[test]
fn watch_root_dotted_app_directory_matches_nested_directories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("rl/a/b/x.yaml"), &rule("a"));
    write(&tmp.path().join("rl/a/c/x.yaml"), &rule("b"));
    let opts = ProviderOptions {
        app_directory: "a.b".to_string(),
        ..watch_root(tmp.path(), "rl")
    };
    assert_eq!(names(&opts), ["a.b.x.yaml"]);
}

#[test]
fn directory_mode_names_are_relative_to_the_app_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("rl/config/basic.yaml"), &rule("a"));
    write(&tmp.path().join("rl/config/sub/x.yaml"), &rule("b"));
    write(&tmp.path().join("rl/other.yaml"), &rule("c"));
    assert_eq!(
        names(&directory(tmp.path(), "rl")),
        ["basic.yaml", "sub.x.yaml"]
    );
    // An empty subdirectory is fine in directory mode.
    write(&tmp.path().join("config/top.yaml"), &rule("d"));
    assert_eq!(names(&directory(tmp.path(), "")), ["top.yaml"]);
}

#[test]
fn empty_subdirectory_in_watch_root_mode_loads_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("config/x.yaml"), &rule("a"));
    let opts = watch_root(tmp.path(), "");
    assert_eq!(opts.target_dir(), None);
    assert!(names(&opts).is_empty());
    let config = load_from_disk(&opts).expect("empty load succeeds");
    assert_eq!(config.tree().domain_count(), 0);
}

#[test]
fn empty_app_directory_in_directory_mode_loads_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("rl/x.yaml"), &rule("a"));
    let opts = ProviderOptions {
        app_directory: String::new(),
        ..directory(tmp.path(), "rl")
    };
    assert_eq!(opts.target_dir(), None);
    assert!(names(&opts).is_empty());
}

#[test]
fn missing_root_is_an_empty_configuration() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let opts = watch_root(&tmp.path().join("nope"), "rl");
    assert!(names(&opts).is_empty());
    let config = load_from_disk(&opts).expect("missing root is not an error");
    assert_eq!(config.tree().domain_count(), 0);
}

#[test]
fn target_that_is_a_file_is_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("rl"), "a file");
    assert!(matches!(
        collect(&watch_root(tmp.path(), "rl")),
        Err(ProviderError::NotADirectory { .. })
    ));
}

#[test]
fn dotfiles_are_loaded_unless_ignored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("config/a.yaml"), &rule("a"));
    write(&tmp.path().join("config/.hidden.yaml"), &rule("b"));
    write(&tmp.path().join("config/.dir/c.yaml"), &rule("c"));
    let opts = directory(tmp.path(), "");
    assert_eq!(names(&opts), [".dir.c.yaml", ".hidden.yaml", "a.yaml"]);
    let ignoring = ProviderOptions {
        ignore_dotfiles: true,
        ..opts
    };
    assert_eq!(names(&ignoring), ["a.yaml"]);
}

#[test]
fn dot_dot_directories_are_never_descended() {
    // A Kubernetes ConfigMap mount.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("rl/config");
    write(&dir.join("..2026_11_30_10_00_00.123/a.yaml"), &rule("a"));
    symlink("..2026_11_30_10_00_00.123", dir.join("..data")).expect("symlink");
    symlink("..data/a.yaml", dir.join("a.yaml")).expect("symlink");
    for ignore_dotfiles in [false, true] {
        let opts = ProviderOptions {
            ignore_dotfiles,
            ..directory(tmp.path(), "rl")
        };
        assert_eq!(
            names(&opts),
            ["a.yaml"],
            "ignore_dotfiles={ignore_dotfiles}"
        );
        let config = load_from_disk(&opts).expect("no duplicate domain");
        assert_eq!(config.tree().domain_count(), 1);
        let opts = ProviderOptions {
            ignore_dotfiles,
            ..watch_root(tmp.path(), "rl")
        };
        assert_eq!(names(&opts), ["config.a.yaml"]);
    }
}

#[test]
fn symlinks_to_files_are_followed_and_to_directories_not() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("config");
    write(&tmp.path().join("elsewhere/x.yaml"), &rule("x"));
    write(&tmp.path().join("elsewhere/sub/y.yaml"), &rule("y"));
    fs::create_dir_all(&dir).expect("mkdir");
    symlink(tmp.path().join("elsewhere/x.yaml"), dir.join("x.yaml")).expect("symlink");
    symlink(tmp.path().join("elsewhere/sub"), dir.join("sub")).expect("symlink");
    symlink(tmp.path().join("missing.yaml"), dir.join("dangling.yaml")).expect("symlink");
    let files = collect(&directory(tmp.path(), "")).expect("collect");
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].name, "x.yaml");
    assert_eq!(files[0].contents, rule("x").into_bytes());
}

#[test]
fn result_is_sorted_and_has_paths() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in ["c.yaml", "a.yaml", "b.yaml"] {
        write(&tmp.path().join("config").join(name), &rule(name));
    }
    let files = collect(&directory(tmp.path(), "")).expect("collect");
    let names: Vec<_> = files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["a.yaml", "b.yaml", "c.yaml"]);
    assert_eq!(
        files[0].path.as_deref(),
        Some(tmp.path().join("config/a.yaml").as_path())
    );
}

#[test]
fn same_name_twice_keeps_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(&tmp.path().join("rl/config/a.yaml"), &rule("x"));
    write(&tmp.path().join("rl/config.a.yaml"), &rule("y"));
    let files = collect(&watch_root(tmp.path(), "rl")).expect("collect");
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].name, "config.a.yaml");
}

#[test]
fn load_errors_name_the_runtime_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
            &tmp.path().join("rl/config/bad.yaml"),
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
        );
    let err = load_from_disk(&watch_root(tmp.path(), "rl")).expect_err("bad unit");
    let config_error = err.config_error().expect("a config error");
    assert_eq!(config_error.file, "config.bad.yaml");
    assert!(err.to_string().starts_with("config.bad.yaml: "), "{err}");
    assert!(err.detailed().contains("(line "), "{}", err.detailed());
}

#[test]
fn scan_lists_what_to_watch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("rl/config");
    write(&dir.join("..2026_a/sub/a.yaml"), &rule("a"));
    symlink("..2026_a", dir.join("..data")).expect("symlink");
    symlink("..data/sub/a.yaml", dir.join("a.yaml")).expect("symlink");
    write(&dir.join("real/b.yaml"), &rule("b"));
    write(&tmp.path().join("rl/unrelated/c.yaml"), &rule("c"));
    let scan = scan(&watch_root(tmp.path(), "rl")).expect("scan");
    let expected: BTreeSet<PathBuf> = [
        tmp.path().join("rl"),
        dir.clone(),
        dir.join("..2026_a"),
        dir.join("..2026_a/sub"),
        dir.join("a.yaml"),
        dir.join("real"),
    ]
    .into_iter()
    .collect();
    assert_eq!(scan.watch, expected);
}
