//! Settings: the environment variables of the original service.
