//! Settings without code: environment variables over a config file over the defaults.
//!
//! The file (`$GPUCACHE_DROPIN_CONFIG`, else `$XDG_CONFIG_HOME/gpucache/dropin.toml`, else
//! `~/.config/gpucache/dropin.toml`) is a small subset of TOML parsed here: `key = value`
//! lines (strings in double quotes, integers with an optional `K`/`M`/`G` suffix, `true` /
//! `false`), `#` comments, and `[app.NAME]` sections whose keys apply only to the executable
//! named `NAME`. `docs/dropin.md` lists the keys and the variables.

use std::path::{Path, PathBuf};

/// How the cache directory is divided between applications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Namespace {
    /// One subdirectory per executable name and ELF build id (`<name>-<build id>`).
    App,
    /// One subdirectory per executable name (`<name>`): rebuilt binaries share it.
    Exe,
    /// Every application in the root directory itself.
    Shared,
}

impl Namespace {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "app" | "exe+build-id" => Some(Self::App),
            "exe" => Some(Self::Exe),
            "shared" | "none" => Some(Self::Shared),
            _ => None,
        }
    }
}

/// The drop-in's settings for this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Off: the drop-in forwards every call untouched.
    pub enabled: bool,
    /// The root of the cache directories; `None` when no home directory is known.
    pub root: Option<PathBuf>,
    /// Byte limit of this application's cache directory.
    pub max_bytes: u64,
    /// Byte limit of every cache under the root together, kept by a daily prune of the
    /// least recently used caches (`crate::prune`); 0: no automatic prune.
    pub total_max_bytes: u64,
    /// Per-application subdirectories.
    pub namespace: Namespace,
    /// Mesa's own cache kept on, inside the cache directory, for what context creation
    /// compiles (`gpucache_egl_mesa_context_cache`).
    pub hybrid: bool,
    /// Byte limit of Mesa's share in the hybrid.
    pub mesa_context_max_bytes: u64,
    /// The real vendor: a GLVND JSON file or a library (name or path); `None`: found the
    /// way GLVND finds vendors.
    pub vendor: Option<String>,
    /// Diagnostics on standard error.
    pub log: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: true,
            root: None,
            max_bytes: 256 << 20,
            total_max_bytes: 1 << 30,
            namespace: Namespace::App,
            hybrid: true,
            mesa_context_max_bytes: 4 << 20,
            vendor: None,
            log: false,
        }
    }
}

/// Where the settings come from: a function reading the environment (injected for tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

impl Settings {
    /// The settings of the executable `exe_name` from `env` and the config file.
    pub fn load(env: Env<'_>, exe_name: &str) -> (Self, Vec<String>) {
        let mut s = Self {
            root: default_root(env),
            ..Self::default()
        };
        let mut warnings = Vec::new();
        if let Some(path) = config_path(env) {
            if let Ok(text) = std::fs::read_to_string(&path) {
                for w in s.apply_file(&text, exe_name) {
                    warnings.push(format!("{}: {w}", path.display()));
                }
            }
        }
        warnings.extend(s.apply_env(env));
        // The real path when it exists: a prune (`crate::prune`) checks and locks the real
        // directories, and the marks that applications hold must name the same ones.
        if let Some(real) = s
            .root
            .as_deref()
            .and_then(|r| std::fs::canonicalize(r).ok())
        {
            s.root = Some(real);
        }
        (s, warnings)
    }

    /// Applies the file's top-level keys, then those of `[app.<exe_name>]`.
    pub fn apply_file(&mut self, text: &str, exe_name: &str) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut section: Option<String> = None;
        let mut app_pairs = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = strip_comment(raw).trim();
            if line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                let name = name.trim();
                section = Some(match name.strip_prefix("app.") {
                    Some(app) => format!("app.{}", unquote(app.trim()).unwrap_or(app.trim())),
                    None => name.to_string(),
                });
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                warnings.push(format!("line {}: not `key = value`", n + 1));
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match section.as_deref() {
                None => {
                    if let Err(e) = self.set(key, value) {
                        warnings.push(format!("line {}: {e}", n + 1));
                    }
                }
                Some(s) if s.strip_prefix("app.") == Some(exe_name) => {
                    app_pairs.push((n, key.to_string(), value.to_string()));
                }
                Some(_) => {}
            }
        }
        for (n, key, value) in app_pairs {
            if key == "total_max_bytes" {
                // One limit for the whole root: whichever application prunes would set it
                // for every other.
                warnings.push(format!(
                    "line {}: total_max_bytes applies to the whole root: set it outside \
                     [app.*] sections",
                    n + 1
                ));
                continue;
            }
            if let Err(e) = self.set(&key, &value) {
                warnings.push(format!("line {}: {e}", n + 1));
            }
        }
        warnings
    }

    /// One `key = value` of the file (value as written: quoted string or bare word).
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let text = unquote(value).unwrap_or(value);
        match key {
            "enabled" => self.enabled = parse_bool(text).ok_or("enabled: not true/false")?,
            "dir" | "directory" => self.root = Some(expand_home(text)),
            "max_bytes" => self.max_bytes = parse_size(text).ok_or("max_bytes: not a size")?,
            "total_max_bytes" => {
                self.total_max_bytes = parse_size(text).ok_or("total_max_bytes: not a size")?
            }
            "namespace" => {
                self.namespace =
                    Namespace::parse(text).ok_or("namespace: not app, exe or shared")?
            }
            "hybrid" => self.hybrid = parse_bool(text).ok_or("hybrid: not true/false")?,
            "mesa_context_max_bytes" => {
                self.mesa_context_max_bytes =
                    parse_size(text).ok_or("mesa_context_max_bytes: not a size")?
            }
            "vendor" => self.vendor = Some(text.to_string()).filter(|v| !v.is_empty()),
            "log" => self.log = parse_bool(text).ok_or("log: not true/false")?,
            other => return Err(format!("unknown key {other}")),
        }
        Ok(())
    }

    /// The environment variables, which override the file.
    fn apply_env(&mut self, env: Env<'_>) -> Vec<String> {
        let mut warnings = Vec::new();
        let vars = [
            ("GPUCACHE_DROPIN", "enabled"),
            ("GPUCACHE_DROPIN_DIR", "dir"),
            ("GPUCACHE_DROPIN_MAX_BYTES", "max_bytes"),
            ("GPUCACHE_DROPIN_TOTAL_MAX_BYTES", "total_max_bytes"),
            ("GPUCACHE_DROPIN_NAMESPACE", "namespace"),
            ("GPUCACHE_DROPIN_HYBRID", "hybrid"),
            (
                "GPUCACHE_DROPIN_MESA_CONTEXT_MAX_BYTES",
                "mesa_context_max_bytes",
            ),
            ("GPUCACHE_DROPIN_VENDOR", "vendor"),
            ("GPUCACHE_DROPIN_LOG", "log"),
        ];
        for (var, key) in vars {
            if let Some(value) = env(var) {
                if let Err(e) = self.set(key, &value) {
                    warnings.push(format!("{var}: {e}"));
                }
            }
        }
        warnings
    }

    /// This application's cache directory under the root.
    pub fn app_dir(&self, exe_name: &str, build_id: Option<&[u8]>) -> Option<PathBuf> {
        let root = self.root.as_ref()?;
        Some(match self.namespace {
            Namespace::Shared => root.clone(),
            Namespace::Exe => root.join(sanitize(exe_name)),
            Namespace::App => root.join(namespace_name(exe_name, build_id)),
        })
    }
}

/// `<name>-<first 16 hex digits of the build id>`, or `<name>` without a build id.
pub fn namespace_name(exe_name: &str, build_id: Option<&[u8]>) -> String {
    let name = sanitize(exe_name);
    match build_id {
        Some(id) if !id.is_empty() => {
            let hex: String = id.iter().take(8).map(|b| format!("{b:02x}")).collect();
            format!("{name}-{hex}")
        }
        _ => name,
    }
}

/// A file name from an executable name: `[A-Za-z0-9._+-]` kept, anything else `_`; never
/// empty, never `.` or `..`.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        "_".to_string()
    } else {
        s
    }
}

/// `$XDG_CACHE_HOME/gpucache`, else `$HOME/.cache/gpucache`.
fn default_root(env: Env<'_>) -> Option<PathBuf> {
    if let Some(x) = env("XDG_CACHE_HOME").filter(|x| x.starts_with('/')) {
        return Some(Path::new(&x).join("gpucache"));
    }
    let home = env("HOME").filter(|h| h.starts_with('/'))?;
    Some(Path::new(&home).join(".cache/gpucache"))
}

/// The config file's path.
pub fn config_path(env: Env<'_>) -> Option<PathBuf> {
    if let Some(p) = env("GPUCACHE_DROPIN_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(x) = env("XDG_CONFIG_HOME").filter(|x| x.starts_with('/')) {
        return Some(Path::new(&x).join("gpucache/dropin.toml"));
    }
    let home = env("HOME").filter(|h| h.starts_with('/'))?;
    Some(Path::new(&home).join(".config/gpucache/dropin.toml"))
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// The line without a `#` comment (a `#` inside double quotes is kept).
fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            '\\' if quoted && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
        escaped = false;
    }
    line
}

/// The contents of a double-quoted string (`\"` and `\\` unescaped); `None` if not quoted.
fn unquote(s: &str) -> Option<&str> {
    s.strip_prefix('"')?.strip_suffix('"')
}

pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Bytes: a number with an optional `K`, `M`, `G` (binary units, `KiB` etc. accepted).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    let lower = s.to_ascii_lowercase();
    let lower = lower.trim_end_matches("ib").trim_end_matches('b');
    let (num, shift) = match lower.chars().last()? {
        'k' => (&lower[..lower.len() - 1], 10),
        'm' => (&lower[..lower.len() - 1], 20),
        'g' => (&lower[..lower.len() - 1], 30),
        _ => (lower, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn defaults_follow_xdg() {
        let env = env_of(&[("HOME", "/home/u")]);
        let (s, w) = Settings::load(&env, "app");
        assert!(w.is_empty());
        assert_eq!(s.root, Some(PathBuf::from("/home/u/.cache/gpucache")));
        assert!(s.enabled && s.hybrid);
        let env = env_of(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(
            Settings::load(&env, "app").0.root,
            Some(PathBuf::from("/x/gpucache"))
        );
        assert_eq!(Settings::load(&env_of(&[]), "app").0.root, None);
    }

    #[test]
    fn file_then_app_section_then_env() {
        let text = r#"
            # the drop-in
            dir = "/var/cache/g#c"   # a comment
            max_bytes = 64M
            hybrid = false
            [app.glxgears]
            enabled = false
            [app."shader_runner"]
            max_bytes = 1G
            namespace = "exe"
        "#;
        let mut s = Settings::default();
        assert!(s.apply_file(text, "shader_runner").is_empty());
        assert_eq!(s.root, Some(PathBuf::from("/var/cache/g#c")));
        assert_eq!(s.max_bytes, 1 << 30);
        assert_eq!(s.namespace, Namespace::Exe);
        assert!(s.enabled && !s.hybrid);
        let mut g = Settings::default();
        g.apply_file(text, "glxgears");
        assert!(!g.enabled);
        assert_eq!(g.max_bytes, 64 << 20);

        let env = env_of(&[
            ("GPUCACHE_DROPIN", "0"),
            ("GPUCACHE_DROPIN_MAX_BYTES", "12K"),
        ]);
        let mut e = s.clone();
        assert!(e.apply_env(&env).is_empty());
        assert!(!e.enabled);
        assert_eq!(e.max_bytes, 12 << 10);
    }

    #[test]
    fn a_linked_root_is_its_real_directory() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let link_s = link.to_str().unwrap().to_string();
        let env = move |k: &str| (k == "GPUCACHE_DROPIN_DIR").then(|| link_s.clone());
        let (s, _) = Settings::load(&env, "app");
        assert_eq!(s.root, Some(std::fs::canonicalize(&real).unwrap()));
        // A root that does not exist yet is kept as named.
        let (s, _) = Settings::load(
            &|k: &str| (k == "GPUCACHE_DROPIN_DIR").then(|| "/nonexistent/x".into()),
            "app",
        );
        assert_eq!(s.root, Some(PathBuf::from("/nonexistent/x")));
    }

    #[test]
    fn the_root_limit_is_one_for_every_application() {
        let text = "total_max_bytes = 2G\n[app.a]\ntotal_max_bytes = 1K\n";
        let mut s = Settings::default();
        let w = s.apply_file(text, "a");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("whole root"), "{w:?}");
        assert_eq!(s.total_max_bytes, 2 << 30);
        assert_eq!(Settings::default().total_max_bytes, 1 << 30);
        let env = env_of(&[("GPUCACHE_DROPIN_TOTAL_MAX_BYTES", "0")]);
        assert!(s.apply_env(&env).is_empty());
        assert_eq!(s.total_max_bytes, 0);
    }

    #[test]
    fn bad_values_warn_and_change_nothing() {
        let mut s = Settings::default();
        let w = s.apply_file("max_bytes = lots\nfoo = 1\nnonsense\n", "a");
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn sizes_and_names() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("2 G"), Some(2 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999G"), None);
        assert_eq!(
            namespace_name("a b/c", Some(&[0xab; 20])),
            "a_b_c-abababababababab"
        );
        assert_eq!(namespace_name("..", None), "_");
        let s = Settings {
            root: Some("/r".into()),
            ..Settings::default()
        };
        assert_eq!(
            s.app_dir("x", Some(&[1, 2])),
            Some(PathBuf::from("/r/x-0102"))
        );
    }
}
