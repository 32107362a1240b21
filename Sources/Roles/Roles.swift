// Placeholder until the Roles layer lands.
