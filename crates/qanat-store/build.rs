fn main() {
    // New migration files must trigger a rebuild of the embedded migrator.
    println!("cargo:rerun-if-changed=migrations");
}
