//! Stable result codes, their names, the thread's last error message, and the guard that
//! keeps panics from crossing the C boundary.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success. Value `0`.
pub const GPUCACHE_OK: i32 = 0;
/// An operating-system I/O error (a directory that cannot be created, read or written).
/// Value `-1`.
pub const GPUCACHE_ERROR_IO: i32 = -1;
/// No entry for this key (`DXGI_ERROR_NOT_FOUND`). Value `-2`.
pub const GPUCACHE_ERROR_NOT_FOUND: i32 = -2;
/// An entry with this key is already stored, or the session's cache is open with another
/// version, or blob-cache callbacks are already installed on the display
/// (`DXGI_ERROR_ALREADY_EXISTS`). Value `-3`.
pub const GPUCACHE_ERROR_ALREADY_EXISTS: i32 = -3;
/// Another key with the same hash is stored (`DXGI_ERROR_CACHE_HASH_COLLISION`). Value `-4`.
pub const GPUCACHE_ERROR_HASH_COLLISION: i32 = -4;
/// The entry does not fit in the cache (`DXGI_ERROR_CACHE_FULL`). Value `-5`.
pub const GPUCACHE_ERROR_CACHE_FULL: i32 = -5;
/// A single value is larger than the cache accepts. Value `-6`.
pub const GPUCACHE_ERROR_VALUE_TOO_LARGE: i32 = -6;
/// The caller's buffer is smaller than the value; nothing was written and the size needed
/// was reported. Value `-7`.
pub const GPUCACHE_ERROR_BUFFER_TOO_SMALL: i32 = -7;
/// The cache kind is disabled by `gpucache_cache_control`
/// (`DXGI_ERROR_NOT_CURRENTLY_AVAILABLE`). Value `-8`.
pub const GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE: i32 = -8;
/// A null pointer, a size out of range, an unknown flag, or an EGL display that is not
/// initialised. Value `-9`.
pub const GPUCACHE_ERROR_INVALID_ARGUMENT: i32 = -9;
/// Not available here: no libEGL, a display without `EGL_ANDROID_blob_cache`, or cache
/// control outside developer mode. Value `-10`.
pub const GPUCACHE_ERROR_UNSUPPORTED: i32 = -10;
/// No blob cache is configured: call `gpucache_egl_configure` first. Value `-11`.
pub const GPUCACHE_ERROR_NOT_CONFIGURED: i32 = -11;
/// A bug inside gpucache (a panic, caught at the boundary) or an error this version does
/// not know how to name. Value `-12`.
pub const GPUCACHE_ERROR_INTERNAL: i32 = -12;
/// A shader does not compile; the message is GL's info log. Value `-13`.
pub const GPUCACHE_ERROR_COMPILE: i32 = -13;
/// A program does not link; the message is GL's info log. Value `-14`.
pub const GPUCACHE_ERROR_LINK: i32 = -14;
/// GL failed: no GL context is current, the loader finds no `glGetString`, or GL could not
/// create a shader or program object. Value `-15`.
pub const GPUCACHE_ERROR_GL: i32 = -15;
/// Bytes read back from a cache directory (a metadata stream) fail their checks. Value
/// `-16`.
pub const GPUCACHE_ERROR_CORRUPT: i32 = -16;
/// The cache directory belongs to another user (not this process's effective user, nor
/// root), who could read its entries or plant code a driver loads; set
/// `allow_foreign_owner` to use it anyway. Value `-17`.
pub const GPUCACHE_ERROR_FOREIGN_OWNER: i32 = -17;

/// Every code with its name; `gpucache_error_name` and the tests read this table.
const NAMES: [(i32, &CStr); 18] = [
    (GPUCACHE_OK, c"GPUCACHE_OK"),
    (GPUCACHE_ERROR_IO, c"GPUCACHE_ERROR_IO"),
    (GPUCACHE_ERROR_NOT_FOUND, c"GPUCACHE_ERROR_NOT_FOUND"),
    (
        GPUCACHE_ERROR_ALREADY_EXISTS,
        c"GPUCACHE_ERROR_ALREADY_EXISTS",
    ),
    (
        GPUCACHE_ERROR_HASH_COLLISION,
        c"GPUCACHE_ERROR_HASH_COLLISION",
    ),
    (GPUCACHE_ERROR_CACHE_FULL, c"GPUCACHE_ERROR_CACHE_FULL"),
    (
        GPUCACHE_ERROR_VALUE_TOO_LARGE,
        c"GPUCACHE_ERROR_VALUE_TOO_LARGE",
    ),
    (
        GPUCACHE_ERROR_BUFFER_TOO_SMALL,
        c"GPUCACHE_ERROR_BUFFER_TOO_SMALL",
    ),
    (
        GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE,
        c"GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE",
    ),
    (
        GPUCACHE_ERROR_INVALID_ARGUMENT,
        c"GPUCACHE_ERROR_INVALID_ARGUMENT",
    ),
    (GPUCACHE_ERROR_UNSUPPORTED, c"GPUCACHE_ERROR_UNSUPPORTED"),
    (
        GPUCACHE_ERROR_NOT_CONFIGURED,
        c"GPUCACHE_ERROR_NOT_CONFIGURED",
    ),
    (GPUCACHE_ERROR_INTERNAL, c"GPUCACHE_ERROR_INTERNAL"),
    (GPUCACHE_ERROR_COMPILE, c"GPUCACHE_ERROR_COMPILE"),
    (GPUCACHE_ERROR_LINK, c"GPUCACHE_ERROR_LINK"),
    (GPUCACHE_ERROR_GL, c"GPUCACHE_ERROR_GL"),
    (GPUCACHE_ERROR_CORRUPT, c"GPUCACHE_ERROR_CORRUPT"),
    (
        GPUCACHE_ERROR_FOREIGN_OWNER,
        c"GPUCACHE_ERROR_FOREIGN_OWNER",
    ),
];

/// The name of a result code (`"GPUCACHE_ERROR_NOT_FOUND"` for `-2`), or
/// `"GPUCACHE_ERROR_UNKNOWN"` for a code this version does not define. The string is static:
/// never free it.
///
/// # Safety
///
/// None needed: any code is accepted, from any thread.
#[no_mangle]
pub extern "C" fn gpucache_error_name(code: i32) -> *const c_char {
    NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"GPUCACHE_ERROR_UNKNOWN", |(_, name)| name)
        .as_ptr()
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// A message describing the last error returned to this thread by a gpucache function
/// that returns a result code, or `""` if there was none. Successful calls leave it alone.
/// The string belongs to gpucache and stays valid until the next failing call on this
/// thread; never free it.
///
/// # Safety
///
/// None needed: callable from any thread at any time, even while it exits.
#[no_mangle]
pub extern "C" fn gpucache_last_error_message() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|e| e.borrow().as_ref().map(|m| m.as_ptr()))
            .ok()
            .flatten()
    })
    .ok()
    .flatten()
    .unwrap_or(c"".as_ptr())
}

/// Records `message` as this thread's last error (ignored while the thread is exiting).
pub(crate) fn set_last_error(message: impl Display) {
    let text = message.to_string().replace('\0', "\u{FFFD}");
    let Ok(text) = CString::new(text) else {
        return;
    };
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut slot) = e.try_borrow_mut() {
            *slot = Some(text);
        }
    });
}

/// A failed call: the code returned to C and the message kept for
/// `gpucache_last_error_message`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(GPUCACHE_ERROR_INVALID_ARGUMENT, message)
    }

    pub(crate) fn not_configured() -> Self {
        Self::new(
            GPUCACHE_ERROR_NOT_CONFIGURED,
            "no blob cache is configured (call gpucache_egl_configure first)",
        )
    }
}

impl From<gpucache::Error> for Failure {
    fn from(e: gpucache::Error) -> Self {
        Self::new(code_of(&e), e.to_string())
    }
}

/// The stable code of a core error; variants added to the core later map to `INTERNAL`
/// until they get a code of their own.
pub(crate) fn code_of(e: &gpucache::Error) -> i32 {
    use gpucache::Error as E;
    match e {
        E::Io(_) => GPUCACHE_ERROR_IO,
        E::NotFound => GPUCACHE_ERROR_NOT_FOUND,
        E::AlreadyExists(_) => GPUCACHE_ERROR_ALREADY_EXISTS,
        E::HashCollision => GPUCACHE_ERROR_HASH_COLLISION,
        E::CacheFull { .. } => GPUCACHE_ERROR_CACHE_FULL,
        E::ValueTooLarge { .. } => GPUCACHE_ERROR_VALUE_TOO_LARGE,
        E::BufferTooSmall { .. } => GPUCACHE_ERROR_BUFFER_TOO_SMALL,
        E::NotCurrentlyAvailable => GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE,
        E::InvalidArgument(_) => GPUCACHE_ERROR_INVALID_ARGUMENT,
        E::Unsupported(_) | E::DeveloperModeRequired => GPUCACHE_ERROR_UNSUPPORTED,
        E::Corrupt(_) => GPUCACHE_ERROR_CORRUPT,
        E::ForeignOwner { .. } => GPUCACHE_ERROR_FOREIGN_OWNER,
        _ => GPUCACHE_ERROR_INTERNAL,
    }
}

impl From<gpucache_gl::Error> for Failure {
    fn from(e: gpucache_gl::Error) -> Self {
        // GL's info logs end with a newline; the message does not need it.
        Self::new(gl_code_of(&e), e.to_string().trim_end())
    }
}

/// The stable code of a program-cache error; engine errors keep their own codes.
pub(crate) fn gl_code_of(e: &gpucache_gl::Error) -> i32 {
    use gpucache_gl::Error as E;
    match e {
        E::Compile { .. } => GPUCACHE_ERROR_COMPILE,
        E::Link { .. } => GPUCACHE_ERROR_LINK,
        E::Gl(_) | E::Context(_) => GPUCACHE_ERROR_GL,
        E::Corrupt(_) => GPUCACHE_ERROR_CORRUPT,
        E::Cache(e) => code_of(e),
        E::Io(_) => GPUCACHE_ERROR_IO,
        _ => GPUCACHE_ERROR_INTERNAL,
    }
}

/// Runs the body of a C entry point that returns a result code: `Ok` is `GPUCACHE_OK`, a
/// failure or a caught panic becomes its code and this thread's last error message.
pub(crate) fn ffi_call(function: &str, body: impl FnOnce() -> Result<(), Failure>) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => GPUCACHE_OK,
        Ok(Err(failure)) => {
            set_last_error(format_args!("{function}: {}", failure.message));
            failure.code
        }
        Err(payload) => {
            set_last_error(format_args!(
                "{function}: internal error (panic: {})",
                panic_message(payload.as_ref())
            ));
            GPUCACHE_ERROR_INTERNAL
        }
    }
}

/// Runs the body of a C entry point that has no result code (the EGL callbacks, close,
/// shutdown): a panic is caught and `fallback` returned.
pub(crate) fn ffi_quiet<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "non-string payload"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(code: i32) -> String {
        // SAFETY: gpucache_error_name always returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(gpucache_error_name(code)) }
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// The numbers are ABI: programs compiled against an older header depend on them.
    #[test]
    fn codes_never_change() {
        let pinned = [
            (GPUCACHE_OK, 0, "GPUCACHE_OK"),
            (GPUCACHE_ERROR_IO, -1, "GPUCACHE_ERROR_IO"),
            (GPUCACHE_ERROR_NOT_FOUND, -2, "GPUCACHE_ERROR_NOT_FOUND"),
            (
                GPUCACHE_ERROR_ALREADY_EXISTS,
                -3,
                "GPUCACHE_ERROR_ALREADY_EXISTS",
            ),
            (
                GPUCACHE_ERROR_HASH_COLLISION,
                -4,
                "GPUCACHE_ERROR_HASH_COLLISION",
            ),
            (GPUCACHE_ERROR_CACHE_FULL, -5, "GPUCACHE_ERROR_CACHE_FULL"),
            (
                GPUCACHE_ERROR_VALUE_TOO_LARGE,
                -6,
                "GPUCACHE_ERROR_VALUE_TOO_LARGE",
            ),
            (
                GPUCACHE_ERROR_BUFFER_TOO_SMALL,
                -7,
                "GPUCACHE_ERROR_BUFFER_TOO_SMALL",
            ),
            (
                GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE,
                -8,
                "GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE",
            ),
            (
                GPUCACHE_ERROR_INVALID_ARGUMENT,
                -9,
                "GPUCACHE_ERROR_INVALID_ARGUMENT",
            ),
            (
                GPUCACHE_ERROR_UNSUPPORTED,
                -10,
                "GPUCACHE_ERROR_UNSUPPORTED",
            ),
            (
                GPUCACHE_ERROR_NOT_CONFIGURED,
                -11,
                "GPUCACHE_ERROR_NOT_CONFIGURED",
            ),
            (GPUCACHE_ERROR_INTERNAL, -12, "GPUCACHE_ERROR_INTERNAL"),
            (GPUCACHE_ERROR_COMPILE, -13, "GPUCACHE_ERROR_COMPILE"),
            (GPUCACHE_ERROR_LINK, -14, "GPUCACHE_ERROR_LINK"),
            (GPUCACHE_ERROR_GL, -15, "GPUCACHE_ERROR_GL"),
            (GPUCACHE_ERROR_CORRUPT, -16, "GPUCACHE_ERROR_CORRUPT"),
            (
                GPUCACHE_ERROR_FOREIGN_OWNER,
                -17,
                "GPUCACHE_ERROR_FOREIGN_OWNER",
            ),
        ];
        for (constant, value, expected) in pinned {
            assert_eq!(constant, value, "{expected} changed its number");
            assert_eq!(name(value), expected);
        }
        assert_eq!(
            pinned.len(),
            NAMES.len(),
            "a code is missing from this test"
        );
        for unknown in [1, -18, i32::MIN, i32::MAX] {
            assert_eq!(name(unknown), "GPUCACHE_ERROR_UNKNOWN");
        }
    }

    #[test]
    fn every_core_error_has_its_code() {
        use gpucache::Error as E;
        let cases = [
            (E::Io(std::io::Error::other("x")), GPUCACHE_ERROR_IO),
            (E::NotFound, GPUCACHE_ERROR_NOT_FOUND),
            (E::AlreadyExists("x"), GPUCACHE_ERROR_ALREADY_EXISTS),
            (E::HashCollision, GPUCACHE_ERROR_HASH_COLLISION),
            (
                E::CacheFull {
                    needed: 2,
                    available: 1,
                },
                GPUCACHE_ERROR_CACHE_FULL,
            ),
            (
                E::ValueTooLarge { size: 2, limit: 1 },
                GPUCACHE_ERROR_VALUE_TOO_LARGE,
            ),
            (
                E::BufferTooSmall {
                    needed: 2,
                    given: 1,
                },
                GPUCACHE_ERROR_BUFFER_TOO_SMALL,
            ),
            (
                E::NotCurrentlyAvailable,
                GPUCACHE_ERROR_NOT_CURRENTLY_AVAILABLE,
            ),
            (
                E::InvalidArgument("x".into()),
                GPUCACHE_ERROR_INVALID_ARGUMENT,
            ),
            (E::Unsupported("x"), GPUCACHE_ERROR_UNSUPPORTED),
            (E::DeveloperModeRequired, GPUCACHE_ERROR_UNSUPPORTED),
            (
                E::Corrupt(gpucache::FormatError::Invalid("x")),
                GPUCACHE_ERROR_CORRUPT,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(code_of(&error), code, "{error:?}");
        }
    }

    #[test]
    fn every_program_cache_error_has_its_code() {
        use gpucache_gl::{Error as E, ShaderKind};
        let cases = [
            (
                E::Compile {
                    kind: ShaderKind::Fragment,
                    log: "0:1(1): error: syntax error\n".into(),
                },
                GPUCACHE_ERROR_COMPILE,
            ),
            (E::Link { log: "x".into() }, GPUCACHE_ERROR_LINK),
            (E::Gl("glCreateProgram returned 0"), GPUCACHE_ERROR_GL),
            (E::Context("x".into()), GPUCACHE_ERROR_GL),
            (
                E::Corrupt(gpucache::FormatError::Invalid("x")),
                GPUCACHE_ERROR_CORRUPT,
            ),
            (
                E::Cache(gpucache::Error::InvalidArgument("x".into())),
                GPUCACHE_ERROR_INVALID_ARGUMENT,
            ),
            (E::Io(std::io::Error::other("x")), GPUCACHE_ERROR_IO),
        ];
        for (error, code) in cases {
            assert_eq!(gl_code_of(&error), code, "{error:?}");
        }
        let f = Failure::from(E::Compile {
            kind: ShaderKind::Fragment,
            log: "0:1(1): error: syntax error\n".into(),
        });
        assert_eq!(
            f.message,
            "the fragment shader does not compile: 0:1(1): error: syntax error"
        );
    }

    #[test]
    fn failures_and_panics_become_codes_and_messages() {
        let last = || {
            // SAFETY: the returned pointer is a NUL-terminated string valid until the next
            // failing call on this thread; it is copied at once.
            unsafe { CStr::from_ptr(gpucache_last_error_message()) }
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(ffi_call("f", || Ok(())), GPUCACHE_OK);
        let code = ffi_call("f", || Err(Failure::invalid("bad\0pointer")));
        assert_eq!(code, GPUCACHE_ERROR_INVALID_ARGUMENT);
        assert_eq!(last(), "f: bad\u{FFFD}pointer");
        assert_eq!(ffi_call("g", || Ok(())), GPUCACHE_OK);
        assert_eq!(last(), "f: bad\u{FFFD}pointer", "success keeps the message");
        let code = ffi_call("h", || panic!("boom {}", 42));
        assert_eq!(code, GPUCACHE_ERROR_INTERNAL);
        assert_eq!(last(), "h: internal error (panic: boom 42)");
        assert_eq!(ffi_quiet(7, || panic!("quiet")), 7);
        // Another thread has its own message.
        let other = std::thread::spawn(move || {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(gpucache_last_error_message()) }
                .to_string_lossy()
                .into_owned()
        });
        assert_eq!(other.join().unwrap(), "");
    }
}
