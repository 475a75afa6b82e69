"""The crossover forecast: `model`, where speculation stops paying from the arms' step costs; `inputs`,
those step costs and a scope's measured acceptance and lengths, from what the pilot holds."""
