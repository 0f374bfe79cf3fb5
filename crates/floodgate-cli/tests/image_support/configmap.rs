//! A ConfigMap volume as kubelet writes it (its AtomicWriter): the data
//! in a timestamped directory, `..data` a symbolic link to it, each key a
//! link through `..data`; an update writes a new timestamped directory,
//! links `..data_tmp` to it, renames that over `..data` (atomic) and
//! removes the old directory.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// A ConfigMap volume's directory with one key.
pub(crate) struct ConfigMapVolume {
    dir: tempfile::TempDir,
    key: String,
    /// The timestamped directory `..data` points to.
    current: String,
    writes: u32,
}

impl ConfigMapVolume {
    /// The volume holding `key` with `text`. Readable by every user, as
    /// kubelet makes it (the image runs as nonroot).
    pub(crate) fn new(key: &str, text: &str) -> ConfigMapVolume {
        let dir = tempfile::tempdir().expect("temp dir");
        set_mode(dir.path(), 0o755);
        let mut v = ConfigMapVolume {
            dir,
            key: key.to_owned(),
            current: String::new(),
            writes: 0,
        };
        v.current = v.write_data(text);
        symlink(&v.current, v.path().join("..data")).expect("..data");
        symlink(format!("..data/{key}"), v.path().join(key)).expect("the key's link");
        v
    }

    /// The directory to mount.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces the key's text as kubelet does.
    pub(crate) fn update(&mut self, text: &str) {
        let new = self.write_data(text);
        let tmp = self.path().join("..data_tmp");
        symlink(&new, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.path().join("..data")).expect("rename over ..data");
        let old = std::mem::replace(&mut self.current, new);
        std::fs::remove_dir_all(self.path().join(old)).expect("remove the old data");
    }

    /// A new timestamped directory holding the key: its name.
    fn write_data(&mut self, text: &str) -> String {
        self.writes += 1;
        let name = format!(
            "..2026_11_29_13_00_{:02}.{:09}",
            self.writes,
            417_337_000 + self.writes
        );
        let data: PathBuf = self.path().join(&name);
        std::fs::create_dir(&data).expect("the data directory");
        set_mode(&data, 0o755);
        let file = data.join(&self.key);
        std::fs::write(&file, text).expect("the key's file");
        set_mode(&file, 0o644);
        name
    }
}

/// `chmod mode path`.
fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
