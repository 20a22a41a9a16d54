//! kbatch-apiserver
