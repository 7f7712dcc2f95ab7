//! Where tether keeps its files on each system, decided in one place: the
//! configuration file, the state directory (OAuth credentials), and the folders
//! other applications keep their settings in (for `tether import`).
//!
//! | | Linux and other unix | macOS | Windows |
//! | --- | --- | --- | --- |
//! | config | `$XDG_CONFIG_HOME/tether/config.json`, else `~/.config/tether/config.json` | `~/Library/Application Support/tether/config.json` (or the XDG path, if only that file exists) | `%APPDATA%\tether\config.json` |
//! | state | `$XDG_STATE_HOME/tether`, else `~/.local/state/tether` | `~/Library/Application Support/tether` | `%LOCALAPPDATA%\tether` |
//!
//! `TETHER_CONFIG` (a file) and `TETHER_STATE_DIR` (a directory) override both
//! everywhere. Relative XDG values are ignored, as the XDG specification asks.
//! Every function here is pure over an operating system name
//! (`std::env::consts::OS`) and an environment, so each system's answer is
//! tested on every system.

use std::path::{Path, PathBuf};

/// One system's view of where things are: its name and its environment.
pub struct Locations<'a> {
    os: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
    exists: &'a dyn Fn(&Path) -> bool,
}

/// The environment of this process, for [`Locations::new`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).and_then(|v| v.into_string().ok())
}

fn file_exists(path: &Path) -> bool {
    path.is_file()
}

impl Locations<'static> {
    /// This process, on this system.
    pub fn here() -> Locations<'static> {
        Locations { os: std::env::consts::OS, env: &process_env, exists: &file_exists }
    }
}

impl<'a> Locations<'a> {
    /// The system `os` with variables from `env`; files are looked for on disk.
    pub fn new(os: &'a str, env: &'a dyn Fn(&str) -> Option<String>) -> Locations<'a> {
        Locations { os, env, exists: &file_exists }
    }

    /// As [`Locations::new`], with `exists` saying which files exist (tests).
    pub fn with_files(
        os: &'a str,
        env: &'a dyn Fn(&str) -> Option<String>,
        exists: &'a dyn Fn(&Path) -> bool,
    ) -> Locations<'a> {
        Locations { os, env, exists }
    }

    fn var(&self, name: &str) -> Option<PathBuf> {
        (self.env)(name).filter(|v| !v.is_empty()).map(PathBuf::from)
    }

    /// An XDG base directory variable, if set to an absolute path.
    fn xdg(&self, name: &str) -> Option<PathBuf> {
        self.var(name).filter(|d| d.is_absolute())
    }

    /// The user's home directory (`%USERPROFILE%` on Windows, `$HOME` elsewhere).
    pub fn home(&self) -> Option<PathBuf> {
        match self.os {
            "windows" => self.var("USERPROFILE").or_else(|| self.var("HOME")),
            _ => self.var("HOME"),
        }
    }

    /// Where applications keep their settings: `~/Library/Application Support`
    /// on macOS, `%APPDATA%` (the roaming profile) on Windows, the XDG config
    /// directory elsewhere.
    pub fn app_config_dir(&self) -> Option<PathBuf> {
        match self.os {
            "macos" => self.home().map(|h| h.join("Library").join("Application Support")),
            "windows" => self.var("APPDATA").or_else(|| self.home().map(|h| h.join("AppData").join("Roaming"))),
            _ => self.xdg_config_dir(),
        }
    }

    fn xdg_config_dir(&self) -> Option<PathBuf> {
        self.xdg("XDG_CONFIG_HOME").or_else(|| self.home().map(|h| h.join(".config")))
    }

    /// The configuration file read when `--config` is absent: `$TETHER_CONFIG`,
    /// else the system's place (see the module's table). On macOS the XDG path
    /// is used instead when only it holds a file, as many command-line tools
    /// keep theirs there. Returned whether or not the file exists; `None` when
    /// no variable says where home is.
    pub fn config_file(&self) -> Option<PathBuf> {
        if let Some(file) = self.var("TETHER_CONFIG") {
            return Some(file);
        }
        let tail = Path::new("tether").join("config.json");
        let native = self.app_config_dir().map(|d| d.join(&tail));
        if self.os == "macos" {
            let xdg = self.xdg_config_dir().map(|d| d.join(&tail));
            if let (Some(native), Some(xdg)) = (&native, &xdg) {
                if !(self.exists)(native) && (self.exists)(xdg) {
                    return Some(xdg.clone());
                }
            }
        }
        native
    }

    /// tether's state directory (credentials live in `credentials/` under it):
    /// `$TETHER_STATE_DIR`, else the system's place (see the module's table).
    pub fn state_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = self.var("TETHER_STATE_DIR") {
            return Some(dir);
        }
        let base = match self.os {
            "windows" => self.var("LOCALAPPDATA").or_else(|| self.home().map(|h| h.join("AppData").join("Local"))),
            "macos" => self.app_config_dir(),
            _ => self.xdg("XDG_STATE_HOME").or_else(|| self.home().map(|h| h.join(".local").join("state"))),
        };
        base.map(|d| d.join("tether"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    fn config(os: &str, vars: &'static [(&'static str, &'static str)], files: &[&str]) -> Option<PathBuf> {
        let env = env(vars);
        let exists = |p: &Path| files.iter().any(|f| Path::new(f) == p);
        Locations::with_files(os, &env, &exists).config_file()
    }

    fn state(os: &str, vars: &'static [(&'static str, &'static str)]) -> Option<PathBuf> {
        let env = env(vars);
        Locations::new(os, &env).state_dir()
    }

    #[test]
    fn linux_follows_xdg() {
        assert_eq!(config("linux", &[("HOME", "/h")], &[]), Some("/h/.config/tether/config.json".into()));
        assert_eq!(
            config("linux", &[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")], &[]),
            Some("/x/tether/config.json".into())
        );
        // Relative XDG values are ignored.
        assert_eq!(
            config("linux", &[("HOME", "/h"), ("XDG_CONFIG_HOME", "rel")], &[]),
            Some("/h/.config/tether/config.json".into())
        );
        assert_eq!(state("linux", &[("HOME", "/h")]), Some("/h/.local/state/tether".into()));
        assert_eq!(state("linux", &[("HOME", "/h"), ("XDG_STATE_HOME", "/s")]), Some("/s/tether".into()));
        assert_eq!(config("linux", &[], &[]), None);
    }

    #[test]
    fn macos_uses_application_support_unless_only_the_xdg_file_exists() {
        let native = "/Users/a/Library/Application Support/tether/config.json";
        let xdg = "/Users/a/.config/tether/config.json";
        assert_eq!(config("macos", &[("HOME", "/Users/a")], &[]), Some(native.into()));
        assert_eq!(config("macos", &[("HOME", "/Users/a")], &[xdg]), Some(xdg.into()));
        assert_eq!(config("macos", &[("HOME", "/Users/a")], &[xdg, native]), Some(native.into()));
        assert_eq!(state("macos", &[("HOME", "/Users/a")]), Some("/Users/a/Library/Application Support/tether".into()));
    }

    #[test]
    fn windows_uses_the_profile_folders() {
        let vars: &'static [(&str, &str)] = &[
            ("USERPROFILE", r"C:\Users\a"),
            ("APPDATA", r"C:\Users\a\AppData\Roaming"),
            ("LOCALAPPDATA", r"C:\Users\a\AppData\Local"),
            ("HOME", "/ignored"),
        ];
        let roaming = Path::new(r"C:\Users\a\AppData\Roaming").join("tether").join("config.json");
        assert_eq!(config("windows", vars, &[]), Some(roaming));
        assert_eq!(state("windows", vars), Some(Path::new(r"C:\Users\a\AppData\Local").join("tether")));
        // Without the variables, the folders under the profile.
        let profile_only: &'static [(&str, &str)] = &[("USERPROFILE", r"C:\Users\a")];
        assert_eq!(
            state("windows", profile_only),
            Some(Path::new(r"C:\Users\a").join("AppData").join("Local").join("tether"))
        );
    }

    #[test]
    fn the_overrides_win_everywhere() {
        for os in ["linux", "macos", "windows", "freebsd"] {
            let vars: &'static [(&str, &str)] = &[("TETHER_CONFIG", "/c.json"), ("TETHER_STATE_DIR", "/st")];
            assert_eq!(config(os, vars, &[]), Some("/c.json".into()), "{os}");
            assert_eq!(state(os, vars), Some("/st".into()), "{os}");
        }
    }
}
