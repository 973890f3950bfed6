//! Test harness for apiagg end-to-end tests.
