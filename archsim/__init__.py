"""archsim package."""
