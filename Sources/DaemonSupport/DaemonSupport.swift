// Placeholder until the daemon support lands.
