//! Provider plugin processes: start, read the port, connect, stop.
