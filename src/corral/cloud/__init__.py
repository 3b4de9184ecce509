"""Cloud drivers: create, list and destroy instances. They report facts and raise typed errors;
they decide nothing."""
