// Placeholder: filled in by the library-layer work.
