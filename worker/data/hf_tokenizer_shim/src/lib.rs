//! The C interface of worker/data/hf_tokenizer_shim.h over Hugging Face's
//! tokenizers crate. Every function catches panics (a panic must not unwind
//! into C++); every buffer and message it returns is malloc'ed and released
//! with paci_hf_tokenizer_free.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::slice;

use tokenizers::Tokenizer;

extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn free(pointer: *mut c_void);
}

/// `bytes` copied into a malloc'ed buffer with a NUL after them, or null when
/// malloc fails.
fn malloc_bytes(bytes: &[u8]) -> *mut c_char {
    unsafe {
        let buffer = malloc(bytes.len() + 1) as *mut u8;
        if !buffer.is_null() {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buffer, bytes.len());
            *buffer.add(bytes.len()) = 0;
        }
        buffer as *mut c_char
    }
}

/// Sets *error (when error is not null) to a malloc'ed copy of `message`.
fn set_error(error: *mut *mut c_char, message: &str) {
    if !error.is_null() {
        unsafe { *error = malloc_bytes(message.as_bytes()) };
    }
}

/// What a caught panic carried, as text.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        format!("tokenizers panicked: {text}")
    } else if let Some(text) = payload.downcast_ref::<String>() {
        format!("tokenizers panicked: {text}")
    } else {
        "tokenizers panicked".to_string()
    }
}

/// Runs `body`, turning an error or a panic into *error and `failed`.
fn guarded<T>(error: *mut *mut c_char, failed: T, body: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(message)) => {
            set_error(error, &message);
            failed
        }
        Err(payload) => {
            set_error(error, &panic_message(payload));
            failed
        }
    }
}

/// The bytes at (data, size); an empty slice for size 0, whatever data is.
unsafe fn bytes_at<'a>(data: *const c_char, size: usize) -> &'a [u8] {
    if size == 0 {
        &[]
    } else {
        slice::from_raw_parts(data as *const u8, size)
    }
}

/// A tokenizer from the bytes of a tokenizer.json, or null with *error set.
#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_load(
    json: *const c_char,
    size: usize,
    error: *mut *mut c_char,
) -> *mut c_void {
    guarded(error, ptr::null_mut(), || {
        let tokenizer = Tokenizer::from_bytes(bytes_at(json, size)).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(tokenizer)) as *mut c_void)
    })
}

#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_destroy(tokenizer: *mut c_void) {
    if tokenizer.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(tokenizer as *mut Tokenizer))));
}

/// The number of ids, added tokens included: one more than the largest id.
#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_vocab_size(tokenizer: *const c_void) -> i64 {
    guarded(ptr::null_mut(), -1, || {
        let tokenizer = &*(tokenizer as *const Tokenizer);
        let largest = tokenizer.get_vocab(true).values().copied().max();
        let size = tokenizer.get_vocab_size(true);
        Ok(size.max(largest.map_or(0, |id| id as usize + 1)) as i64)
    })
}

/// The id of the token (its bytes at token, size), or -1 when there is none.
#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_token_to_id(
    tokenizer: *const c_void,
    token: *const c_char,
    size: usize,
) -> i64 {
    guarded(ptr::null_mut(), -1, || {
        let tokenizer = &*(tokenizer as *const Tokenizer);
        let token = std::str::from_utf8(bytes_at(token, size)).map_err(|e| e.to_string())?;
        Ok(tokenizer.token_to_id(token).map_or(-1, i64::from))
    })
}

/// The ids of the UTF-8 text, no special tokens added: their count, the ids
/// in *ids (malloc'ed; null when there are none), or -1 with *error set.
#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_encode(
    tokenizer: *const c_void,
    text: *const c_char,
    size: usize,
    ids: *mut *mut u32,
    error: *mut *mut c_char,
) -> i64 {
    *ids = ptr::null_mut();
    guarded(error, -1, || {
        let tokenizer = &*(tokenizer as *const Tokenizer);
        let text = std::str::from_utf8(bytes_at(text, size)).map_err(|e| e.to_string())?;
        let encoding = tokenizer.encode_fast(text, false).map_err(|e| e.to_string())?;
        let encoded = encoding.get_ids();
        if !encoded.is_empty() {
            let buffer = malloc(std::mem::size_of_val(encoded)) as *mut u32;
            if buffer.is_null() {
                return Err("out of memory".to_string());
            }
            ptr::copy_nonoverlapping(encoded.as_ptr(), buffer, encoded.len());
            *ids = buffer;
        }
        Ok(encoded.len() as i64)
    })
}

/// The text of `count` ids (special tokens kept), NUL-terminated and
/// malloc'ed, its length in *size; null with *error set on failure.
#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_decode(
    tokenizer: *const c_void,
    ids: *const u32,
    count: usize,
    size: *mut usize,
    error: *mut *mut c_char,
) -> *mut c_char {
    guarded(error, ptr::null_mut(), || {
        let tokenizer = &*(tokenizer as *const Tokenizer);
        let ids = if count == 0 { &[][..] } else { slice::from_raw_parts(ids, count) };
        let text = tokenizer.decode(ids, false).map_err(|e| e.to_string())?;
        let buffer = malloc_bytes(text.as_bytes());
        if buffer.is_null() {
            return Err("out of memory".to_string());
        }
        *size = text.len();
        Ok(buffer)
    })
}

/// Releases a buffer or message returned by the functions above.
#[no_mangle]
pub unsafe extern "C" fn paci_hf_tokenizer_free(buffer: *mut c_void) {
    free(buffer);
}
