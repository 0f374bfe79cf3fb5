//! Reading a file named by configuration, never more than a bound: a path
//! that names `/dev/zero`, `/dev/urandom` or a pipe that never ends is
//! refused once the bound is passed, rather than read until memory runs
//! out.

use std::io::{self, Read};
use std::path::Path;

/// Reads the whole file at `path` when it holds at most `max` bytes;
/// otherwise an error of kind [`io::ErrorKind::InvalidData`] that says
/// so. Reads at most `max + 1` bytes whatever the file is (a device, a
/// pipe, a file growing meanwhile).
///
/// ```
/// use floodgate_policy::read::read_bounded;
/// let dir = std::env::temp_dir().join(format!("fg-bounded-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let file = dir.join("small.txt");
/// std::fs::write(&file, b"hello")?;
/// assert_eq!(read_bounded(&file, 5)?, b"hello");
/// let err = read_bounded(&file, 4).unwrap_err();
/// assert_eq!(err.to_string(), "larger than 4 bytes");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    // The size the file says it has, as a hint only (devices say 0).
    let hint = file
        .metadata()
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map_or(0, |m| m.len());
    if hint > max {
        return Err(too_large(max));
    }
    let mut bytes = Vec::with_capacity(hint as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(bytes)
}

/// The error of a file over `max` bytes.
fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than {max} bytes"),
    )
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn endless_devices_are_refused() {
        let err = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(err.to_string(), "larger than 1048576 bytes");
    }

    #[test]
    fn empty_devices_read_empty() {
        assert_eq!(read_bounded(Path::new("/dev/null"), 10).unwrap(), b"");
    }

    #[test]
    fn missing_files_say_so() {
        let err = read_bounded(Path::new("/nonexistent/floodgate.yaml"), 10).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
