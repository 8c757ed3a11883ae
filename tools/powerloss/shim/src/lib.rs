//! `LD_PRELOAD` shim for the power-loss harness.
//!
//! The kernel does not forward `syncfs(2)` to a FUSE daemon (only
//! virtiofs gets `FUSE_SYNCFS`), so the harness cannot see it. This shim
//! replaces the C library's `syncfs`: it makes the real system call, then
//! asks for the extended attribute `user.powerloss.syncfs` of the same
//! descriptor. On the harness's mount that request is the signal "make
//! everything durable"; anywhere else it fails harmlessly (`ENODATA`,
//! `ENOTSUP`) and is ignored.

use std::os::raw::c_int;

/// The attribute name the harness answers (NUL-terminated).
const SIGNAL: &[u8] = b"user.powerloss.syncfs\0";

/// `syncfs(2)`, followed by the harness's signal.
///
/// # Safety
///
/// Called by C code with a descriptor, as the C library's `syncfs` is.
#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    // SAFETY: the raw system call takes one descriptor.
    let rc = unsafe { libc::syscall(libc::SYS_syncfs, fd) } as c_int;
    if rc != 0 {
        return rc;
    }
    // SAFETY: a NUL-terminated name and a null buffer of size 0 (a size
    // query).
    let got = unsafe {
        libc::fgetxattr(
            fd,
            SIGNAL.as_ptr().cast::<libc::c_char>(),
            std::ptr::null_mut(),
            0,
        )
    };
    if got < 0 {
        // SAFETY: reading errno of this thread.
        let err = unsafe { *libc::__errno_location() };
        if err == libc::EIO {
            // The harness has lost power: the flush did not happen.
            return -1;
        }
        // SAFETY: restoring errno after a failure we ignore.
        unsafe { *libc::__errno_location() = 0 };
    }
    0
}
