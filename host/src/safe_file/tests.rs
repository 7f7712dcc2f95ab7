//! The attacks of a shared state directory and of a config path pointed at the
//! wrong thing, each refused at once.

use super::*;

#[test]
fn a_regular_file_is_read_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, b"{}").unwrap();
    assert_eq!(read_regular(&path, 16).unwrap(), b"{}");
    std::fs::write(&path, vec![b' '; 17]).unwrap();
    let err = read_regular(&path, 16).unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
    assert!(read_regular(dir.path(), 16).unwrap_err().to_string().contains("a directory"));
    assert_eq!(read_regular(&dir.path().join("absent"), 16).unwrap_err().kind(), io::ErrorKind::NotFound);
}

#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_in_a_files_place_is_refused_at_once() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("planted.json");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let started = Instant::now();
    let err = read_regular(&fifo, SECRET_LIMIT).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "a FIFO must not be waited on");
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let zero = dir.path().join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    assert!(read_regular(&zero, SECRET_LIMIT).unwrap_err().to_string().contains("not a regular file"));
    // A symlink to a regular file is read (projected tokens are symlinks).
    let real = dir.path().join("real");
    std::fs::write(&real, b"token").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(read_regular(&link, 16).unwrap(), b"token");
}

#[cfg(unix)]
#[test]
fn a_secret_others_may_write_is_not_trusted() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.json");
    std::fs::write(&path, b"{}").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(read_private(&path, 16).is_ok());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = read_private(&path, 16).unwrap_err();
    assert!(err.to_string().contains("others may write to it"), "{err}");
    assert!(read_regular(&path, 16).is_ok(), "a config file is not held to it");
    let shared = dir.path().join("credentials");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(check_private_dir(&shared).unwrap_err().to_string().contains("others may write"));
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(check_private_dir(&shared).is_ok());
    assert!(check_private_dir(&dir.path().join("not yet")).is_ok());
}

#[cfg(unix)]
#[test]
fn a_secret_another_user_owns_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("planted.json");
    std::fs::write(&path, b"{}").unwrap();
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; chown touches nothing else. Only root
    // may give a file away: elsewhere the test has nothing to show.
    if unsafe { libc::chown(c_path.as_ptr(), 65534, 65534) } != 0 {
        return;
    }
    let err = read_private(&path, 16).unwrap_err();
    assert!(err.to_string().contains("belongs to uid 65534"), "{err}");
}
